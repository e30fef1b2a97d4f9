"""FB-RAG vs long context vs order-preserving RAG: quality, latency per stage, tokens.

Builds long contexts offline from the shared HotpotQA train questions (each question's ten
paragraphs hidden among distractor paragraphs from the pooled corpus, fixed seed), runs every
method on the same contexts in one process, and writes one JSONL row per (question, method)
as it goes (re-running resumes) plus a JSON summary:

    .venv/bin/python benchmarks/fbrag_latency.py --questions 20 --out benchmarks/results

Every method starts from a cold KV cache (both models are reset before each run), so no
method is timed on another's prefill.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from datetime import date
from pathlib import Path

from tqdm import tqdm

from ragfunnel.eval.long_context import build_long_context
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, resolve
from ragfunnel.methods import make_method
from ragfunnel.metrics import best_over_references, exact_match, token_f1
from ragfunnel.types import Document

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa_train_hipporag"

# name -> (method, options). All RAG methods read the same final budget.
BUDGET, STAGE1 = 1500, 3000
METHODS = {
    "lc": ("lc", {}),
    "op": ("op", {"budget": BUDGET}),
    "fb-f": ("fb-f", {"budget": BUDGET, "stage1_budget": STAGE1, "samples": 5}),
    "fb": ("fb", {"budget": BUDGET, "stage1_budget": STAGE1, "samples": 5}),
    "fb-f k=1": ("fb-f", {"budget": BUDGET, "stage1_budget": STAGE1, "samples": 1}),
}


def load_questions(n: int, seed: int) -> tuple[list[dict], list[Document]]:
    questions = json.loads((DATA / "hotpotqa_train.json").read_text())
    corpus = json.loads((DATA / "hotpotqa_train_corpus.json").read_text())
    pool = [Document(title, title, "".join(sents)) for title, sents in corpus.items()]
    random.Random(seed).shuffle(questions)
    return questions[:n], pool


def run_one(name: str, question: dict, context: str, light, strong) -> dict:
    method, options = METHODS[name]
    for llm in (light, strong):
        getattr(llm, "reset", lambda: None)()  # HTTP backends keep no local cache
    models = {"strong": strong} | ({"light": light} if method.startswith("fb") else {})
    p = make_method(method, task="multihop", **models, **options).run(question["question"], context)
    refs = [question["answer"]]
    return {
        "id": question["_id"],
        "method": name,
        "answer": p.answer,
        "gold": question["answer"],
        "f1": best_over_references(token_f1, p.answer, refs),
        "em": best_over_references(exact_match, p.answer, refs),
        "seconds": p.trace.seconds,
        "llm_seconds": p.trace.llm_seconds,
        "input_tokens": p.trace.input_tokens,
        "stages": {s.name: {"seconds": s.seconds, "llm_seconds": s.llm_seconds, "input_tokens": s.input_tokens,
                            "output_tokens": s.output_tokens} for s in p.trace.stages},
        "chunks_used": [sc.chunk.position for sc in p.chunks_used],
    }


def summarise(rows: list[dict]) -> dict:
    by_method: dict[str, list[dict]] = {}
    for r in rows:
        by_method.setdefault(r["method"], []).append(r)
    mean = statistics.fmean
    summary = {}
    for name, rs in by_method.items():
        stage_names = list(rs[0]["stages"])
        summary[name] = {
            "n": len(rs),
            "f1": mean(r["f1"] for r in rs),
            "em": mean(r["em"] for r in rs),
            "seconds": mean(r["seconds"] for r in rs),
            "input_tokens": mean(r["input_tokens"] for r in rs),
            "non_llm_share": mean((r["seconds"] - r["llm_seconds"]) / r["seconds"] for r in rs),
            "stages": {s: {"seconds": mean(r["stages"][s]["seconds"] for r in rs if s in r["stages"]),
                           "input_tokens": mean(r["stages"][s]["input_tokens"] for r in rs if s in r["stages"])}
                       for s in stage_names},
        }
    targets = {}
    if {"fb-f", "fb-f k=1"} <= summary.keys():
        k5 = summary["fb-f"]["stages"]["stage2_forward"]["seconds"]
        k1 = summary["fb-f k=1"]["stages"]["stage2_forward"]["seconds"]
        targets["stage2_k5_over_k1"] = {"value": k5 / k1, "target": "<= 1.5"}
    best_fb = max((m for m in ("fb-f", "fb") if m in summary), key=lambda m: summary[m]["f1"], default=None)
    if best_fb:
        targets["best_fb_variant"] = best_fb
        targets["fb_non_llm_share"] = {"value": summary[best_fb]["non_llm_share"], "target": "< 0.05"}
        if "lc" in summary:
            targets["fb_latency_over_lc"] = {"value": summary[best_fb]["seconds"] / summary["lc"]["seconds"],
                                             "target": "<= 0.6"}
        if "op" in summary:
            targets["fb_f1_minus_op_f1"] = {"value": summary[best_fb]["f1"] - summary["op"]["f1"], "target": ">= 0"}
    return {"methods": summary, "targets": targets}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("--words", type=int, default=6000, help="target context length in words")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {list(METHODS)}")
    ap.add_argument("--light", default=DEFAULT_LIGHT)
    ap.add_argument("--strong", default=DEFAULT_STRONG)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args()
    if not DATA.exists():
        raise SystemExit(f"shared data not found at {DATA}")
    methods = args.methods.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    rows_path = args.out / "fbrag_latency.jsonl"
    done = set()
    rows = []
    if rows_path.exists():
        rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
        done = {(r["id"], r["method"]) for r in rows}

    light, strong = resolve(args.light), resolve(args.strong)
    questions, pool = load_questions(args.questions, args.seed)
    contexts = {}
    for q in questions:
        own = [Document(t, t, "".join(s)) for t, s in q["context"]]
        contexts[q["_id"]] = build_long_context(own, pool, target_words=args.words, seed=args.seed)
    todo = [(q, m) for q in questions for m in methods if (q["_id"], m) not in done]
    with rows_path.open("a") as f:
        for q, m in tqdm(todo, desc="fbrag_latency", unit="run"):
            row = run_one(m, q, contexts[q["_id"]].text, light, strong)
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()

    wanted = {q["_id"] for q in questions}
    result = summarise([r for r in rows if r["id"] in wanted and r["method"] in methods])
    result["setup"] = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, {platform.python_version()}",
        "light": args.light, "strong": args.strong, "questions": len(questions),
        "context_words_mean": statistics.fmean(c.n_words for c in contexts.values()),
        "budget": BUDGET, "stage1_budget": STAGE1, "seed": args.seed,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    (args.out / "fbrag_latency.json").write_text(json.dumps(result, indent=2))
    print(markdown_table(result))


def markdown_table(result: dict) -> str:
    """The summary as the Markdown table recorded in benchmarks/RESULTS.md."""
    lines = ["| method | n | F1 | EM | mean s | stage seconds | LLM input tokens | non-LLM share |",
             "|---|---|---|---|---|---|---|---|"]
    for name, m in result["methods"].items():
        stages = ", ".join(f"{s} {v['seconds']:.1f}" for s, v in m["stages"].items())
        lines.append(f"| {name} | {m['n']} | {m['f1']:.3f} | {m['em']:.3f} | {m['seconds']:.1f} | {stages} | "
                     f"{m['input_tokens']:.0f} | {m['non_llm_share']:.4f} |")
    lines.append("")
    for key, target in result["targets"].items():
        if isinstance(target, str):
            lines.append(f"- {key}: {target}")
        else:
            lines.append(f"- {key}: {target['value']:.3f} (target {target['target']})")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
