"""Distilled pre-rankers against the bi-encoder they would replace, on the labels funnel_vs_flat.py made.

For a dataset ``funnel_vs_flat.py`` has run on, this trains two cross-encoders from the bundled
MiniLM weights on the same labelled training questions (``benchmarks/out/funnel/<dataset>/
distill_labels.jsonl``, attention scores reused, no post-ranker run):

    cross-encoder alone       its new head learns relevance from the labels (``--prior-weight 0``)
    correction (default)      score = 10 x bi-encoder cosine + the cross-encoder's logit, head from zero

and measures pre-ranking answer recall AR@1..4 over documents (stage 1's clusters -> 4 documents)
on the benchmark's test questions (``benchmarks/results/funnel/<dataset>/rows.jsonl``), beside the
bi-encoder itself. Results: ``benchmarks/results/funnel/<dataset>/distill_prior.json``.

    .venv/bin/python benchmarks/distill_prior.py --dataset hotpotqa
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ragfunnel.corpus.distill import DEFAULT_PRIOR_WEIGHT, LABELS_FILE, Labelled, train_pre_ranker
from ragfunnel.corpus.funnel import FunnelRetriever
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.eval.metrics import answer_recall_at_k
from ragfunnel.journal import read_rows
from ragfunnel.retrieve.embed import minilm_directory
from ragfunnel.retrieve.rerank import BiEncoderPreRanker, load_pre_ranker

KS = (1, 2, 3, 4)


def pre_ranking_recall(index: CorpusIndex, ranker, rows: list[dict], name: str) -> dict:
    funnel = FunnelRetriever(index, pre_ranker=ranker, post_ranker=None)
    recalls = []
    for r in tqdm(rows, desc=name, unit="question"):
        ids, _ = funnel.retrieve(r["question"])
        kept, _ = funnel.pre_rank(r["question"], ids)
        recalls.append([answer_recall_at_k([d.render() for d in kept[:4]], r["answers"], k) for k in KS])
    return {"n": len(rows), **{f"AR@{k}": round(100 * float(v), 1)
                               for k, v in zip(KS, np.mean(recalls, axis=0), strict=True)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="hotpotqa", help="a dataset funnel_vs_flat.py has run on")
    parser.add_argument("--work", type=Path, default=Path("benchmarks/out/funnel"))
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results/funnel"))
    args = parser.parse_args()
    work, results = args.work / args.dataset, args.results / args.dataset
    labelled = [Labelled(**r) for r in read_rows(work / LABELS_FILE)]
    rows = read_rows(results / "rows.jsonl")
    if not labelled or not rows:
        parser.error(f"run funnel_vs_flat.py --datasets {args.dataset} first (no labels or test rows)")
    index = CorpusIndex(work / "index")
    out = {"labelled_questions": len(labelled), "test_questions": len(rows), "training": {}, "pre_ranking": {}}
    out["pre_ranking"]["bi-encoder"] = pre_ranking_recall(index, BiEncoderPreRanker(stored=index.document_vectors),
                                                          rows, "bi-encoder")
    for name, weight in (("cross-encoder alone", 0.0), ("correction to the bi-encoder", DEFAULT_PRIOR_WEIGHT)):
        model_dir = work / "distill_prior" / f"weight{weight:g}"
        started = time.perf_counter()
        log = train_pre_ranker(labelled, init=minilm_directory(), out=model_dir, prior_weight=weight)
        out["training"][name] = {**log.__dict__, "wall_seconds": round(time.perf_counter() - started, 1)}
        ranker = load_pre_ranker(model_dir, stored=index.document_vectors)
        out["pre_ranking"][name] = pre_ranking_recall(index, ranker, rows, name)
    (results / "distill_prior.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out["pre_ranking"], indent=2))


if __name__ == "__main__":
    main()
