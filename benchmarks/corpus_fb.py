"""FB-RAG over a corpus index (``ask --index DIR --method fb``) against FunnelRAG, paired, on the shared
HotpotQA and MuSiQue train questions and their corpora.

Both methods share the funnel's first two stages (BM25 over clusters of linked documents, then the MiniLM
pre-ranker over their documents). FunnelRAG then cuts the top 8 documents into passages, keeps 4 by the
0.5B's attention, and the 1.5B answers from them; FB-RAG reads the top 20 documents as one context: the
0.5B drafts five answers from its Stage-I selection, the drafts re-score the chunks, and the 1.5B answers
from 1,500 tokens of them. Task ``multihop`` for both; answer F1 as ragfunnel scores it.

    .venv/bin/python benchmarks/corpus_fb.py --examples 15 --out benchmarks/results/corpus_fb
    .venv/bin/python benchmarks/corpus_fb.py --analyse-only --out benchmarks/results/corpus_fb

Each dataset's index is built once under ``--out``; rows are written as they finish (resumable).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from dataclasses import replace
from datetime import date
from pathlib import Path

from ragfunnel.corpus import load_corpus
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.eval.runner import load_eval, run_eval
from ragfunnel.llm.registry import set_disk_caches
from ragfunnel.methods import make_method

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
DATASETS = {
    "hotpotqa": (SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train.json",
                 SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train_corpus.json"),
    "musique": (SHARED / "musique_train_hipporag" / "musique_train.json",
                SHARED / "musique_train_hipporag" / "musique_train_corpus.json"),
}
METHODS = ("funnel", "fb")
TASK = "multihop"


class OverIndex:
    """A corpus method as the eval runner calls a method (it passes the example's context, unused here)."""

    def __init__(self, method):
        self.method, self.name = method, method.name

    def run(self, question: str, context: str, *, choices: list[str] | None = None):
        return self.method.run(question, choices=choices)


def collect(out: Path, datasets: list[str], n: int) -> None:
    set_disk_caches(False)  # every call runs: the seconds are real
    for name in datasets:
        questions, corpus = DATASETS[name]
        index_dir = out / f"index-{name}"
        build_index(load_corpus(corpus), index_dir, source=str(corpus))
        index = CorpusIndex(index_dir)
        methods = {m: OverIndex(make_method(m, index=index, task=TASK)) for m in METHODS}
        examples = [replace(e, context=None) for e in load_dataset(questions, limit=n).examples]
        run_eval(examples, methods, out / name, config={"dataset": str(questions), "corpus": str(corpus),
                                                        "task": TASK, "methods": list(METHODS)})


def analyse(out: Path) -> dict:
    result: dict = {"date": str(date.today()), "machine": platform.machine(), "datasets": {}}
    for run in sorted(p for p in out.iterdir() if (p / "rows.jsonl").exists()):
        rows = [r for r in load_eval(run).rows if r.error is None]
        by_question: dict[str, dict] = {}
        for r in rows:
            by_question.setdefault(r.example_id, {})[r.method] = r
        paired = [q for q in by_question.values() if all(m in q for m in METHODS)]
        if not paired:
            continue
        diffs = [q["fb"].metrics["f1"] - q["funnel"].metrics["f1"] for q in paired]
        result["datasets"][run.name] = {
            "n": len(paired),
            **{m: {"f1": round(100 * statistics.mean(q[m].metrics["f1"] for q in paired), 1),
                   "median_seconds": round(statistics.median(q[m].seconds for q in paired), 2),
                   "mean_seconds": round(statistics.mean(q[m].seconds for q in paired), 2)} for m in METHODS},
            "fb_wins": sum(d > 0 for d in diffs), "fb_losses": sum(d < 0 for d in diffs),
            "mean_difference": round(100 * statistics.mean(diffs), 1),
            "difference_stderr": (round(100 * statistics.stdev(diffs) / len(diffs) ** 0.5, 1)
                                  if len(diffs) > 1 else None),
        }
    (out / "corpus_fb.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=15, help="questions per dataset (the first N)")
    parser.add_argument("--datasets", default="hotpotqa,musique")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/corpus_fb"))
    parser.add_argument("--analyse-only", action="store_true")
    args = parser.parse_args()
    if not SHARED.exists():
        parser.error(f"shared data not found at {SHARED}")
    if not args.analyse_only:
        collect(args.out, [d.strip() for d in args.datasets.split(",") if d.strip()], args.examples)
    print(json.dumps(analyse(args.out), indent=2))


if __name__ == "__main__":
    main()
