"""Cold and warm answers: lc, op, fb (selection / whole document), fb-f and auto on documents asked three times.

Each HotpotQA document hides three train questions' paragraphs among the paragraphs of further
questions, in order, until it holds about ``--words`` words; the three questions are then asked one
after another. Each real LongBench text (``--longbench FILE:ROW``, from
``../shared/data/longbench_minilongbench_dev``) has one question with references; two generic
questions about the text follow it, timed but not scored. The first question is *cold* (no model
holds the document: memory and disk stores are emptied before each method's turn), the later two
*warm* (what the first read left behind).
The LLM call cache is off throughout: every answer is generated.

Also measured on the first document, side by side: Stage II decode of K=5 drafts together vs one
draft (the light model already holding the prompt), and an identical ``ask`` repeated with the
call cache on.

    .venv/bin/python benchmarks/answer_speed.py --words 2000,4000 --longbench qasper:0,multifieldqa_en:0 \
        --out benchmarks/results/answer_speed.json

Rows go to the ``.jsonl`` beside ``--out`` as they finish (a re-run skips finished (document,
method) pairs); the summary (per length and method: cold and warm seconds, F1, auto's choices)
to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from ragfunnel.llm import resolve, set_disk_caches
from ragfunnel.llm.prefix_store import DiskPrefixStore
from ragfunnel.methods import make_method
from ragfunnel.metrics import best_over_references, token_f1
from ragfunnel.prompts import build_prompt
from ragfunnel.types import SamplingParams

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
HOTPOT = SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train.json"
LONGBENCH = SHARED / "longbench_minilongbench_dev"
GENERIC = ["Who or what is this text mainly about?", "What is the main conclusion of this text?"]
LIGHT, STRONG = "bundled:qwen2.5-0.5b", "bundled:qwen2.5-1.5b"
METHODS = {"lc": ("lc", {}), "op": ("op", {}), "fb-selection": ("fb", {"draft_from": "selection"}),
           "fb-document": ("fb", {"draft_from": "document"}), "fb-f": ("fb-f", {"draft_from": "selection"}),
           "auto": ("auto", {})}


def paragraphs(example: dict) -> list[str]:
    return [f"{title}\n{''.join(sents).strip()}" for title, sents in example["context"]]


def documents(words: list[int], start: int) -> list[dict]:
    """One document per length: three questions' paragraphs first in line, then others' as filler."""
    data = json.loads(HOTPOT.read_text())
    docs = []
    for i, target in enumerate(words):
        first = start + 20 * i
        asked = data[first:first + 3]
        parts, j = [], first
        while sum(len(p.split()) for p in parts) < target:
            parts += paragraphs(data[j])
            j += 1
        docs.append({"id": f"hotpot-{target}w", "words": sum(len(p.split()) for p in parts),
                     "text": "\n\n".join(parts),
                     "questions": [{"question": e["question"], "answers": [e["answer"]]} for e in asked]})
    return docs


def longbench_documents(picks: list[str]) -> list[dict]:
    docs = []
    for pick in picks:
        name, _, row = pick.partition(":")
        r = json.loads((LONGBENCH / f"{name}.jsonl").read_text().splitlines()[int(row or 0)])
        docs.append({"id": r["_id"], "words": len(r["context"].split()), "text": r["context"],
                     "questions": [{"question": r["input"], "answers": r["answers"]},
                                   *({"question": q, "answers": []} for q in GENERIC)]})
    return docs


def fresh(store_root: Path) -> None:
    """No model holds any document: memory states dropped, the disk store emptied."""
    from ragfunnel.methods.auto import LEDGER

    shutil.rmtree(store_root, ignore_errors=True)
    LEDGER._spent.clear()  # auto starts with no history of this document
    for spec in (LIGHT, STRONG):
        llm = resolve(spec)
        llm.reset()
        llm.disk_prefixes = DiskPrefixStore(store_root)


def run_pair(doc: dict, label: str, store_root: Path) -> dict:
    name, extra = METHODS[label]
    options = {"task": "multihop", "light": LIGHT, "strong": STRONG, **extra}
    if name == "lc":
        options = {"task": "multihop", "strong": STRONG}
    elif name == "op":
        options = {"task": "multihop", "strong": STRONG}
    method = make_method(name, **options)
    fresh(store_root)
    answers = []
    for q in doc["questions"]:
        started = time.perf_counter()
        p = method.run(q["question"], doc["text"])
        seconds = time.perf_counter() - started
        answers.append({"question": q["question"], "answer": p.answer, "seconds": round(seconds, 2),
                        "f1": best_over_references(token_f1, p.answer, q["answers"]) if q["answers"] else None,
                        "method": p.method, "input_tokens": p.trace.input_tokens,
                        "stages": [{"name": s.name, "seconds": round(s.seconds, 2), "detail": s.detail}
                                   for s in p.trace.stages]})
    return {"document": doc["id"], "words": doc["words"], "method": label, "answers": answers}


def decode_batching(doc: dict) -> dict:
    """Stage II decode, K=5 together vs K=1, with the light model already holding the prompt."""
    light = resolve(LIGHT)
    prompt = build_prompt("multihop", "rationale", question=doc["questions"][0]["question"],
                          context=" ".join(doc["text"].split()[:1500]))
    light.generate([prompt], SamplingParams(max_tokens=1))  # read the prompt once; both timings below decode only
    timings = {}
    for k in (1, 5):
        started = time.perf_counter()
        drafting = SamplingParams(max_tokens=96, temperature=1.0, top_p=0.9, top_k=50, seed=k)
        outs = light.generate([prompt], drafting, n=k)[0]
        timings[f"k{k}"] = {"seconds": round(time.perf_counter() - started, 2),
                            "tokens": [c.completion_tokens for c in outs]}
    timings["ratio"] = round(timings["k5"]["seconds"] / timings["k1"]["seconds"], 2)
    return timings


def call_cache_rerun(doc: dict, cache_root: Path) -> dict:
    """The same op question twice with the call cache on: the second answer comes from disk."""
    from ragfunnel.llm.call_cache import CallCache

    strong = resolve(STRONG)
    strong.call_cache = CallCache(cache_root / "calls.sqlite")
    method = make_method("op", task="multihop", strong=STRONG)
    q = doc["questions"][0]["question"]
    times, answers = [], []
    for _ in range(2):
        started = time.perf_counter()
        answers.append(method.run(q, doc["text"]).answer)
        times.append(time.perf_counter() - started)
    strong.call_cache = None
    return {"first_seconds": round(times[0], 2), "second_seconds": round(times[1], 3),
            "speedup": round(times[0] / times[1], 1), "identical": answers[0] == answers[1]}


def summarise(rows: list[dict]) -> dict:
    out: dict = {}
    for r in rows:
        a = r["answers"]
        warm = [x["seconds"] for x in a[1:]]
        out.setdefault(r["document"], {"words": r["words"]})[r["method"]] = {
            "cold_seconds": a[0]["seconds"], "warm_seconds": round(statistics.mean(warm), 2),
            "f1": round(statistics.mean(x["f1"] for x in a if x["f1"] is not None), 3),
            "chose": [x["method"] for x in a] if r["method"] == "auto" else None}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--words", default="2000,4000", help="Document lengths in words, comma-separated.")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"Of {', '.join(METHODS)}.")
    ap.add_argument("--start", type=int, default=50, help="First HotpotQA train example used.")
    ap.add_argument("--longbench", default="", help="LongBench texts as FILE:ROW, comma-separated "
                                                     "(e.g. qasper:0,multifieldqa_en:0).")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/answer_speed.json"))
    args = ap.parse_args()
    set_disk_caches(False)
    docs = documents([int(w) for w in args.words.split(",") if w], args.start)
    docs += longbench_documents([p for p in args.longbench.split(",") if p])
    rows_path = args.out.with_suffix(".jsonl")
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()] if rows_path.exists() else []
    done = {(r["document"], r["method"]) for r in rows}
    scratch = Path(tempfile.mkdtemp(prefix="answer_speed-"))
    extra = {}
    try:
        for doc in docs:
            for label in args.methods.split(","):
                if (doc["id"], label) in done:
                    continue
                row = run_pair(doc, label, scratch / "kv")
                rows.append(row)
                with rows_path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(doc["id"], label, [(x["seconds"], x["f1"], x["method"]) for x in row["answers"]], flush=True)
        extra["decode_batching"] = decode_batching(docs[0])
        print("decode", extra["decode_batching"], flush=True)
        extra["call_cache_rerun"] = call_cache_rerun(docs[0], scratch)
        print("call cache", extra["call_cache_rerun"], flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    args.out.write_text(json.dumps({"summary": summarise(rows), **extra}, indent=2))
    print(json.dumps(summarise(rows), indent=2))


if __name__ == "__main__":
    main()
