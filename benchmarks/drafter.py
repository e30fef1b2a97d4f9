"""Which light model should draft? SmolLM2-135M vs Qwen2.5-Coder-0.5B as FB-RAG's drafter, same questions.

HotpotQA train questions hidden among pooled-corpus paragraphs until each context holds 4,000
words (the ``long`` setting of ``benchmarks/quality.py``: 300-word chunks, budgets 1,500 / 3,000),
FB-RAG (FB, η 0.5/0.5, drafts from Stage I's selection), the strong model always
bundled:qwen2.5-1.5b. Per drafter: supporting-passage recall of the final context, F1, EM, and
seconds (Stage II and whole answer). Each drafter's rows are a resumable eval run under ``--out``;
the call cache is off, so every draft is generated.

    .venv/bin/python benchmarks/drafter.py --examples 15 --out benchmarks/results/drafter
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from ragfunnel.corpus import load_corpus
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.eval.long_context import lengthen
from ragfunnel.eval.runner import load_eval, run_eval
from ragfunnel.llm import set_disk_caches
from ragfunnel.methods import make_method

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa_train_hipporag"
QUESTIONS, CORPUS = DATA / "hotpotqa_train.json", DATA / "hotpotqa_train_corpus.json"
DRAFTERS = {"smollm2-135m": "bundled:smollm2-135m", "qwen2.5-0.5b": "bundled:qwen2.5-0.5b"}
OPTIONS = {"chunk_words": 300, "budget": 1500, "stage1_budget": 3000, "draft_from": "selection"}


def summarise(rows: list[dict]) -> dict:
    ok = [r for r in rows if "error" not in r]
    stage2 = [s["seconds"] for r in ok for s in r["trace"]["stages"] if s["name"] == "stage2_forward"]
    recall = [r["gold_recall"] for r in ok if r.get("gold_recall") is not None]
    return {"n": len(rows), "failures": len(rows) - len(ok),
            "f1": round(statistics.mean(r["metrics"]["f1"] for r in ok), 3),
            "em": round(statistics.mean(r["metrics"]["em"] for r in ok), 3),
            "gold_recall": round(statistics.mean(recall), 3) if recall else None,
            "stage2_seconds": round(statistics.mean(stage2), 2) if stage2 else None,
            "seconds": round(statistics.mean(r["trace"]["seconds"] for r in ok), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/drafter"))
    args = parser.parse_args()
    set_disk_caches(False)
    pool = load_corpus(CORPUS)
    examples = [lengthen(e, pool, target_words=4000) for e in load_dataset(QUESTIONS, limit=args.examples).examples]
    config = {"dataset": str(QUESTIONS), "format": "auto", "task": "multihop", "options": OPTIONS,
              "corpus": str(CORPUS), "context_words": 4000}
    summary = {}
    for name, spec in DRAFTERS.items():
        method = make_method("fb", task="multihop", light=spec, **OPTIONS)
        run_eval(examples, {"fb": method}, args.out / name, config={**config, "light": spec})
        summary[name] = summarise([r.to_json() for r in load_eval(args.out / name).rows])
    pairs = {}
    by = {name: {r.example_id: r.to_json() for r in load_eval(args.out / name).rows}
          for name in DRAFTERS}
    a, b = DRAFTERS
    common = sorted(set(by[a]) & set(by[b]))
    pairs["em_only_" + a] = sum(by[a][i]["metrics"].get("em", 0) > by[b][i]["metrics"].get("em", 0) for i in common)
    pairs["em_only_" + b] = sum(by[b][i]["metrics"].get("em", 0) > by[a][i]["metrics"].get("em", 0) for i in common)
    summary["paired"] = pairs
    (args.out / "drafter.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
