"""Does distillation work with easy negatives? A check on the labels funnel_vs_flat.py already made.

Adds easy negatives to the existing HotpotQA labels (benchmarks/out/funnel/hotpotqa/distill_labels.jsonl)
as ``label_question`` now does, reusing their attention scores (no post-ranker run), trains a
cross-encoder from MiniLM, and compares pre-ranking AR@1..4 over documents with the bi-encoder on the
20 test questions of funnel_vs_flat.py's first run (benchmarks/results/funnel/hotpotqa/rows.first-run.jsonl).
Run after funnel_vs_flat.py:

    .venv/bin/python benchmarks/distill_easy_negatives.py
"""
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.eval.metrics import answer_recall_at_k
from ragfunnel.eval.runner import read_rows
from ragfunnel.retrieve.distill import (
    DEFAULT_EASY_NEGATIVES,
    Labelled,
    answer_hits,
    draw_easy_negatives,
    train_pre_ranker,
)
from ragfunnel.retrieve.embed import minilm_directory
from ragfunnel.retrieve.funnel import FunnelRetriever
from ragfunnel.retrieve.rerank import BiEncoderPreRanker, CrossEncoderPreRanker

work = Path("benchmarks/out/funnel/hotpotqa")
out = Path("benchmarks/out/easyneg")
results = Path("benchmarks/results/funnel/hotpotqa/distill_easy_negatives.json")
ix = CorpusIndex(work / "index")
f = FunnelRetriever(ix, pre_ranker=BiEncoderPreRanker(), post_ranker=None)
questions = Path(__file__).resolve().parents[2] / "shared/data/hotpotqa_train_hipporag/hotpotqa_train.json"
answers = {e.id: e.answers for e in load_dataset(questions).examples}
widened = []
for x in (Labelled(**r) for r in read_rows(work / "distill_labels.jsonl")):
    ids, _ = f.retrieve(x.question)
    kept = {i for i in ids if ix.document(i).title in set(x.titles)}  # labels name their documents by title
    extra = draw_easy_negatives(ix, ids, kept, DEFAULT_EASY_NEGATIVES, x.example_id)
    hits = answer_hits(extra, answers[x.example_id]).tolist()
    widened.append(replace(x, titles=x.titles + [d.title for d in extra], texts=x.texts + [d.text for d in extra],
                           scores=x.scores + [None] * len(extra), hits=x.hits + hits,
                           positive=x.positive + hits))
started = time.time()
log = train_pre_ranker(widened, init=minilm_directory(), out=out / "model", progress=False)
print("trained", log.epoch_loss, round(time.time() - started), "s", flush=True)
rows = read_rows(Path("benchmarks/results/funnel/hotpotqa/rows.first-run.jsonl"))
result = {}
rankers = [("bi-encoder", BiEncoderPreRanker()), ("distilled, easy negatives", CrossEncoderPreRanker(out / "model"))]
for name, ranker in rankers:
    g = FunnelRetriever(ix, pre_ranker=ranker, post_ranker=None)
    ar = []
    for r in rows:
        ids, _ = g.retrieve(r["question"])
        kept, _ = g.pre_rank(r["question"], ids)
        ar.append([answer_recall_at_k([d.render() for d in kept[:4]], r["answers"], k) for k in (1, 2, 3, 4)])
    means = np.mean(ar, axis=0)
    result[name] = {"n": len(rows),
                    **{f"AR@{k}": round(100 * float(v), 1) for k, v in zip((1, 2, 3, 4), means, strict=True)}}
    print(name, result[name], flush=True)
results.write_text(json.dumps({"training": log.__dict__, "pre_ranking": result}, indent=2))
