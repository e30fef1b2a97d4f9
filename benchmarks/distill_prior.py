"""Distilled pre-rankers against the bi-encoder they would replace, on the labels funnel_vs_flat.py made.

For a dataset ``funnel_vs_flat.py`` has run on, this trains cross-encoders from the bundled
MiniLM weights on the same labelled training questions (``benchmarks/out/funnel/<dataset>/
distill_labels.jsonl``, attention scores reused, no post-ranker run), with the same seed and epochs:

    alone     cross-encoder alone: its new head learns relevance from the labels (``--prior-weight 0``),
              easy negatives included
    default   correction: score = 10 x bi-encoder cosine + the cross-encoder's logit, head from zero,
              easy negatives included (``funnel distill``'s defaults)
    plain     the paper's Eq. 5-6 alone (``--plain``): each question's D_m (the documents the pre-ranker
              kept; the labels' easy negatives dropped), the cross-encoder's logit alone, no prior

and measures pre-ranking answer recall AR@1..4 over documents (stage 1's clusters -> 4 documents)
on the benchmark's test questions (``benchmarks/results/funnel/<dataset>/rows.jsonl``), beside the
bi-encoder itself, each model loaded from its directory as ``--pre-ranker DIR`` would load it.
Results: ``benchmarks/results/funnel/<dataset>/distill_prior.json`` (``--variants`` picks a subset).

    .venv/bin/python benchmarks/distill_prior.py --dataset hotpotqa
    .venv/bin/python benchmarks/distill_prior.py --dataset hotpotqa --variants default plain
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
from ragfunnel.journal import read_config, read_rows
from ragfunnel.metrics import answer_recall_at_k
from ragfunnel.retrieve.embed import minilm_directory
from ragfunnel.retrieve.rerank import BiEncoderPreRanker, load_pre_ranker

KS = (1, 2, 3, 4)
# name in the JSON, model directory under distill_prior/, train_pre_ranker's settings
VARIANTS = {
    "alone": ("cross-encoder alone", "weight0", {"prior_weight": 0.0}),
    "default": ("correction to the bi-encoder", f"weight{DEFAULT_PRIOR_WEIGHT:g}",
                {"prior_weight": DEFAULT_PRIOR_WEIGHT}),
    "plain": ("plain (the paper's Eq. 5-6)", "plain", {"plain": True}),
}


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
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                        help="distilled pre-rankers to train and measure (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="training seed, the same for every variant")
    parser.add_argument("--epochs", type=int, default=3, help="training epochs, the same for every variant")
    args = parser.parse_args()
    work, results = args.work / args.dataset, args.results / args.dataset
    labelled = [Labelled(**r) for r in read_rows(work / LABELS_FILE)]
    labels_config = read_config((work / LABELS_FILE).with_suffix(".config.json")) or {}
    rows = read_rows(results / "rows.jsonl")
    if not labelled or not rows:
        parser.error(f"run funnel_vs_flat.py --datasets {args.dataset} first (no labels or test rows)")
    if "plain" in args.variants and "top_documents" not in labels_config and any(x.kept is None for x in labelled):
        parser.error(f"{work / LABELS_FILE} records neither which documents are easy negatives nor top_documents; "
                     "label again with funnel_vs_flat.py")
    index = CorpusIndex(work / "index")
    out = {"labelled_questions": len(labelled), "test_questions": len(rows), "labels": labels_config,
           "seed": args.seed, "epochs": args.epochs, "training": {}, "pre_ranking": {}}
    out["pre_ranking"]["bi-encoder"] = pre_ranking_recall(index, BiEncoderPreRanker(stored=index.document_vectors),
                                                          rows, "bi-encoder")
    for variant in args.variants:
        name, directory, settings = VARIANTS[variant]
        model_dir = work / "distill_prior" / directory
        # The same questions for every variant; plain reads each one's D_m alone (older labels don't say where
        # the easy negatives start: the pre-ranker's top_documents come first).
        training = ([x.without_easy_negatives(labels_config.get("top_documents")) for x in labelled]
                    if settings.get("plain") else labelled)
        started = time.perf_counter()
        log = train_pre_ranker(training, init=minilm_directory(), out=model_dir, epochs=args.epochs, seed=args.seed,
                               **settings)
        out["training"][name] = {**log.__dict__, "wall_seconds": round(time.perf_counter() - started, 1)}
        ranker = load_pre_ranker(model_dir, stored=index.document_vectors)
        out["pre_ranking"][name] = {"ranker": type(ranker).__name__, **pre_ranking_recall(index, ranker, rows, name)}
    (results / "distill_prior.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out["pre_ranking"], indent=2))


if __name__ == "__main__":
    main()
