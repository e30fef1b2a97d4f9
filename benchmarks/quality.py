"""Answer quality of every provided-context method on real multi-hop questions, with the bundled models.

Settings (each its own resumable run directory under ``--out``, rows written as they finish):

``distractor``  HotpotQA train questions with their own ten paragraphs (≈ 1,000 words, ≈ 1.3k
                tokens): 100-word chunks, final budget 500 tokens, FB-RAG Stage I 1,000.
``long``        the same questions hidden among pooled-corpus paragraphs until the context holds
                4,000 words (ragfunnel.eval.long_context.lengthen): 300-word chunks, budgets
                1,500 / 3,000 as in benchmarks/fbrag_latency.py.

``distractor-b250``, ``distractor-b1000``
                the distractor setting at final budgets 250 and 1,000 tokens (≈ 2 and 8 chunks), OP-RAG
                and FB-RAG (FB) only: with ``distractor`` (500) they make the paper's quality-vs-number-of-
                chunks curve, drawn over the questions answered at all three budgets.

Then ``ragfunnel report`` over the runs goes to ``--out/report`` (tables, quality-vs-latency,
quality-vs-budget and chunk-rank plots) and the headline numbers to ``--out/quality.json``:

    .venv/bin/python benchmarks/quality.py --examples 50 --settings distractor,long --out benchmarks/results/quality
    .venv/bin/python benchmarks/quality.py --examples 20 --settings distractor-b250,distractor-b1000 \
        --out benchmarks/results/quality

Light model bundled:qwen2.5-0.5b, strong bundled:qwen2.5-1.5b, task prompt "multihop".
"""

from __future__ import annotations

import argparse
import json
import platform
from datetime import date
from pathlib import Path

from ragfunnel.corpus import load_corpus
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.eval.long_context import lengthen
from ragfunnel.eval.report import summarise_run, write_report
from ragfunnel.eval.runner import run_eval
from ragfunnel.methods import make_method, options_of

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa_train_hipporag"
QUESTIONS, CORPUS = DATA / "hotpotqa_train.json", DATA / "hotpotqa_train_corpus.json"
METHODS = ["lc", "vanilla", "op", "self-route", "fb", "fb-f"]
SETTINGS = {
    "distractor": {"context_words": None, "options": {"chunk_words": 100, "budget": 500, "stage1_budget": 1000}},
    "long": {"context_words": 4000, "options": {"chunk_words": 300, "budget": 1500, "stage1_budget": 3000}},
    **{f"distractor-b{budget}": {"context_words": None, "methods": ["op", "fb"],
                                 "options": {"chunk_words": 100, "budget": budget, "stage1_budget": 1000}}
       for budget in (250, 1000)},
}


def run_setting(name: str, n: int, out: Path) -> None:
    setting = SETTINGS[name]
    examples = load_dataset(QUESTIONS, limit=n).examples
    config = {"dataset": str(QUESTIONS), "format": "auto", "task": "multihop", "options": setting["options"]}
    if setting["context_words"]:
        pool = load_corpus(CORPUS)
        examples = [lengthen(e, pool, target_words=setting["context_words"]) for e in examples]
        config |= {"corpus": str(CORPUS), "context_words": setting["context_words"]}
    options = setting["options"]
    methods = {m: make_method(m, task="multihop", **{k: v for k, v in options.items() if k in options_of(m)})
               for m in setting.get("methods", METHODS)}
    run_eval(examples, methods, out / name, config=config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=50, help="questions per setting (first N of the file)")
    parser.add_argument("--settings", default="distractor,long", help="comma-separated: " + ", ".join(SETTINGS))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/quality"))
    args = parser.parse_args()
    if not QUESTIONS.exists():
        parser.error(f"shared data not found at {DATA}")
    names = [name.strip() for name in args.settings.split(",") if name.strip()]
    if unknown := [name for name in names if name not in SETTINGS]:
        parser.error(f"unknown setting {', '.join(unknown)}; valid settings: {', '.join(SETTINGS)}")
    for name in names:
        run_setting(name, args.examples, args.out)
    # The report and headline cover every setting run so far, not only this invocation's.
    run_dirs = [args.out / name for name in SETTINGS if (args.out / name / "rows.jsonl").exists()]
    write_report(run_dirs, args.out / "report")
    headline = {
        f"{d.name} / {s.method}": {
            "n": s.n, "failures": s.failures, **{k: round(v, 4) for k, v in s.metrics.items()},
            "seconds_mean": round(s.seconds_mean, 2), "input_tokens": round(s.input_tokens),
            "answer_chunk_at_1": s.answer_at(1), "answer_chunk_at_3": s.answer_at(3),
            "gold_chunk_at_1": s.gold_at(1), "gold_chunk_at_3": s.gold_at(3), "gold_recall": s.gold_recall,
            "rows_with_gold": len(s.gold_ranks),
        }
        for d in run_dirs for s in summarise_run(d)
    }
    summary = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {platform.python_version()}",
               "settings": {d.name: SETTINGS[d.name] for d in run_dirs}, "results": headline}
    (args.out / "quality.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(headline, indent=2))


if __name__ == "__main__":
    main()
