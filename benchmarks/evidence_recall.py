"""Which ranking puts the evidence within the budget? Evidence recall of chunk rankings, with no LLM.

For every question the context is cut into chunks, each ranking scores them, the best are kept within
``--budget`` tokens of the strong model's tokenizer (as OP-RAG keeps them), and the question counts as
*evidence read* when a kept chunk holds a reference answer or every supporting passage was touched
(:func:`ragfunnel.metrics.evidence_read`, the number ``eval`` reports). Rankings:

``bm25``        BM25 over the question alone (the lexical baseline the others are measured against)
``dense``       the bundled MiniLM's cosine, each chunk scored by its best ~100-word window
``rrf``         reciprocal-rank fusion of bm25 and dense (k = 60)
``hybrid``      max-normalised bm25 plus dense's cosine rescaled to [0, 1] over the chunks, equal weights
                (:func:`ragfunnel.retrieve.ranking.question_scores`, what the methods use)
``+nb``         a ranking with neighbour expansion: each chunk's score raised to half its best neighbour's
``+prf``        a ranking with feedback: the terms marking its two best chunks that few other chunks share
                (a bridge entity) searched for again, added at half weight

each at ``--chunk-words`` 300 and at the smaller sizes given. ``--attention N`` also measures, on the first N
questions of each setting at 100 words, selection by the bundled 0.5B's attention (FunnelRAG's post-ranker,
``ragfunnel.retrieve.attention``) over the hybrid ranking's best chunks within twice the budget.

Settings: HotpotQA and MuSiQue train questions
(HippoRAG's files) and AMOR's HotpotQA, each hidden among its corpus' passages to ``--context-words``; and
the LongBench dev documents in English (only answers found word for word can be judged there).

    .venv/bin/python benchmarks/evidence_recall.py --examples 100 --out benchmarks/results/evidence_recall
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from collections import Counter
from datetime import date
from pathlib import Path

import numpy as np

from ragfunnel.corpus import load_corpus
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.eval.long_context import lengthen
from ragfunnel.eval.runner import gold_word_spans
from ragfunnel.llm import DEFAULT_STRONG, resolve
from ragfunnel.methods.base import select_within_budget
from ragfunnel.metrics import evidence_read, gold_recall
from ragfunnel.retrieve.bm25 import tokenize
from ragfunnel.retrieve.fusion import max_normalize
from ragfunnel.retrieve.ranking import bm25_scores, dense_scores, hybrid
from ragfunnel.text import chunk_words
from ragfunnel.types import Example

RANKINGS = ("bm25", "dense", "rrf", "hybrid", "bm25+nb", "rrf+nb", "hybrid+nb", "bm25+prf", "rrf+prf", "hybrid+prf")
RRF_K = 60  # reciprocal-rank fusion's constant (Cormack et al., 2009)
NEIGHBOUR_SHARE = 0.5
# Feedback: the terms that mark the best chunks and occur in a few others (a bridge entity a second hop is
# about) are searched for again, and their scores added at this weight.
FEEDBACK_CHUNKS, FEEDBACK_TERMS, FEEDBACK_WEIGHT = 2, 8, 0.5
FEEDBACK_MAX_SHARE = 0.1  # a term in more than this share of the chunks links nothing in particular
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
HOTPOT_CORPUS = SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train_corpus.json"
MULTIHOP = {
    "hotpotqa": (SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train.json", HOTPOT_CORPUS),
    "musique": (SHARED / "musique_train_hipporag" / "musique_train.json",
                SHARED / "musique_train_hipporag" / "musique_train_corpus.json"),
    "hotpotqa_amor": (SHARED / "hotpotqa_train_amor" / "hotpotqa_train100_amor.jsonl", HOTPOT_CORPUS),
}
LONGBENCH = [SHARED / "longbench_minilongbench_dev" / f"{name}.jsonl"
             for name in ("qasper", "multifieldqa_en", "narrativeqa")]


def reciprocal_rank(*scores: np.ndarray, k: int = RRF_K) -> np.ndarray:
    """Σ 1 / (k + rank) over the rankings (rank 1 = best)."""
    total = np.zeros(len(scores[0]))
    for s in scores:
        ranks = np.empty(len(s))
        ranks[np.argsort(-s, kind="stable")] = np.arange(1, len(s) + 1)
        total += 1.0 / (k + ranks)
    return total


def with_neighbours(scores: np.ndarray, share: float = NEIGHBOUR_SHARE) -> np.ndarray:
    """Each chunk at least ``share`` of its better neighbour's score: the passage a bridge fact spills into."""
    padded = np.pad(scores, 1)
    return np.maximum(scores, share * np.maximum(padded[:-2], padded[2:]))


def feedback_terms(question: str, chunks, first: np.ndarray) -> list[str]:
    """The terms of the best chunks under ``first`` that the question lacks and that occur in some other
    chunk, but in few: weighted by their count in the best chunks times their idf."""
    terms = tokenize([c.text for c in chunks])
    asked = set(tokenize([question])[0])
    df = Counter(t for ts in terms for t in set(ts))
    most = max(2, int(FEEDBACK_MAX_SHARE * len(chunks)))
    weight: Counter[str] = Counter()
    for i in np.argsort(-np.asarray(first), kind="stable")[:FEEDBACK_CHUNKS]:
        for t, tf in Counter(terms[i]).items():
            if t not in asked and 2 <= df[t] <= most:
                weight[t] += tf * math.log(len(chunks) / df[t])
    return [t for t, _ in weight.most_common(FEEDBACK_TERMS)]


def with_feedback(question: str, chunks, first: np.ndarray) -> np.ndarray:
    """``first`` (max-normalised) plus :data:`FEEDBACK_WEIGHT` times the BM25 of its feedback terms."""
    terms = feedback_terms(question, chunks, first)
    base = max_normalize(np.maximum(first, 0.0))[0]
    if not terms:
        return base
    return base + FEEDBACK_WEIGHT * max_normalize(bm25_scores(" ".join(terms), chunks))[0]


def fuse(ranking: str, bm25: np.ndarray, dense: np.ndarray | None, *, question: str, chunks) -> np.ndarray:
    """The scores ``ranking`` (one of :data:`RANKINGS`) gives from each chunk's BM25 and dense scores."""
    base, _, expand = ranking.partition("+")
    scores = {"bm25": lambda: np.asarray(bm25, dtype=np.float64), "dense": lambda: dense,
              "rrf": lambda: reciprocal_rank(bm25, dense), "hybrid": lambda: hybrid(bm25, dense)}[base]()
    if expand == "prf":
        return with_feedback(question, chunks, scores)
    return with_neighbours(scores) if expand == "nb" else scores


def needs_dense(ranking: str) -> bool:
    return not ranking.startswith("bm25")


def settings(n: int, context_words: int) -> dict[str, list[Example]]:
    out = {}
    for name, (questions, corpus) in MULTIHOP.items():
        pool = load_corpus(corpus)
        out[name] = [lengthen(e, pool, target_words=context_words) for e in load_dataset(questions, limit=n).examples]
    out["longbench"] = [e for path in LONGBENCH for e in load_dataset(path, format="longbench", limit=n).examples]
    return out


def judged(example: Example, kept_positions: list[int], chunks, window: int) -> bool | None:
    spans = gold_word_spans(example)
    recall = None
    if spans is not None:
        used = [(chunks[i].position * window, chunks[i].position * window + chunks[i].n_words) for i in kept_positions]
        recall = gold_recall(used, spans)
    return evidence_read([chunks[i].text for i in kept_positions], [c.text for c in chunks], example.answers, recall)


def measure(examples: dict[str, list[Example]], *, rankings: list[str], sizes: list[int], budget: int) -> dict:
    strong = resolve(DEFAULT_STRONG)
    results: dict = {}
    for window in sizes:
        for name, rows in examples.items():
            per_ranking: dict[str, list[bool | None]] = {r: [] for r in rankings}
            seconds: dict[str, float] = {r: 0.0 for r in rankings}
            for e in rows:
                chunks = chunk_words(e.context or "", chunk_words=window)
                began = time.perf_counter()
                bm25 = bm25_scores(e.question, chunks)
                bm25_seconds = time.perf_counter() - began
                dense = dense_scores(e.question, chunks) if any(map(needs_dense, rankings)) else None
                dense_seconds = time.perf_counter() - began - bm25_seconds
                for r in rankings:
                    scores = fuse(r, bm25, dense, question=e.question, chunks=chunks)
                    seconds[r] += bm25_seconds + (dense_seconds if needs_dense(r) else 0.0)
                    kept = select_within_budget(chunks, scores, budget=budget, llm=strong)
                    per_ranking[r].append(judged(e, [sc.chunk.position for sc in kept], chunks, window))
            for r, verdicts in per_ranking.items():
                known = [v for v in verdicts if v is not None]
                results.setdefault(f"{r}@{window}", {})[name] = {
                    "evidence_read": sum(known), "n": len(known),
                    "recall": round(100 * sum(known) / len(known), 1) if known else None,
                    "mean_ms": round(1000 * seconds[r] / max(len(rows), 1), 1),
                    "verdicts": verdicts,
                }
            print(f"{window:>4} words  {name:<14}" + "  ".join(
                f"{r} {results[f'{r}@{window}'][name]['recall']}" for r in rankings), flush=True)
    return results


def attention_recall(examples: dict[str, list[Example]], n: int, *, budget: int, window: int = 100) -> dict:
    """Evidence recall of hybrid's chunks within ``budget`` and of the 0.5B's attention choosing among hybrid's
    best within 2 x ``budget``, on the first ``n`` questions of each setting, with seconds per question."""
    from ragfunnel.llm import DEFAULT_LIGHT
    from ragfunnel.retrieve.attention import load_post_ranker

    strong, ranker = resolve(DEFAULT_STRONG), load_post_ranker(DEFAULT_LIGHT)
    out: dict = {}
    for name, rows in examples.items():
        verdicts: dict[str, list] = {"hybrid": [], "attention": []}
        seconds = 0.0
        for e in rows[:n]:
            chunks = chunk_words(e.context or "", chunk_words=window)
            scores = hybrid(bm25_scores(e.question, chunks), dense_scores(e.question, chunks))
            kept = select_within_budget(chunks, scores, budget=budget, llm=strong)
            verdicts["hybrid"].append(judged(e, [sc.chunk.position for sc in kept], chunks, window))
            pool = select_within_budget(chunks, scores, budget=2 * budget, llm=strong)
            began = time.perf_counter()
            attention = ranker.score(e.question, [sc.chunk.text for sc in pool])
            seconds += time.perf_counter() - began
            by_attention = np.zeros(len(chunks))
            by_attention[[sc.chunk.position for sc in pool]] = attention + 1.0  # the pool above the rest
            chosen = select_within_budget(chunks, by_attention, budget=budget, llm=strong)
            verdicts["attention"].append(judged(e, [sc.chunk.position for sc in chosen], chunks, window))
        out[name] = {k: {"evidence_read": sum(bool(v) for v in vs), "n": sum(v is not None for v in vs)}
                     for k, vs in verdicts.items()}
        out[name]["attention_seconds_per_question"] = round(seconds / max(1, len(rows[:n])), 2)
        print(f"attention {name}: {out[name]}", flush=True)
    return out


def paired(results: dict, a: str, b: str) -> dict:
    """Questions where ``b`` read the evidence and ``a`` did not, and the reverse, over every setting."""
    gain = loss = n = 0
    for name in results[a]:
        for x, y in zip(results[a][name]["verdicts"], results[b][name]["verdicts"], strict=True):
            if x is None or y is None:
                continue
            n += 1
            gain += bool(y and not x)
            loss += bool(x and not y)
    return {"n": n, "b_only": gain, "a_only": loss, "difference_points": round(100 * (gain - loss) / n, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=100, help="questions per setting")
    parser.add_argument("--context-words", type=int, default=3000)
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--sizes", default="300,200,150,100", help="chunk sizes in words")
    parser.add_argument("--rankings", default=",".join(RANKINGS))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/evidence_recall"))
    parser.add_argument("--attention", type=int, default=0, metavar="N",
                        help="also measure the 0.5B's attention as the selector on N questions per setting (only)")
    args = parser.parse_args()
    examples = settings(args.examples, args.context_words)
    if args.attention:
        args.out.mkdir(parents=True, exist_ok=True)
        found = attention_recall(examples, args.attention, budget=args.budget)
        (args.out / "attention.json").write_text(json.dumps({"date": str(date.today()), "budget": args.budget,
                                                             "context_words": args.context_words, **found}, indent=1))
        return
    rankings = args.rankings.split(",")
    results = measure(examples, rankings=rankings, sizes=[int(s) for s in args.sizes.split(",")],
                      budget=args.budget)
    overall = {}
    for key, per in results.items():
        read = sum(v["evidence_read"] for v in per.values())
        n = sum(v["n"] for v in per.values())
        overall[key] = {"recall": round(100 * read / n, 1), "n": n,
                        "mean_ms": round(statistics.mean(v["mean_ms"] for v in per.values()), 1)}
    baseline = "bm25@300"
    comparisons = {key: paired(results, baseline, key) for key in results if key != baseline}
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"date": str(date.today()), "machine": platform.machine(), "budget": args.budget,
               "context_words": args.context_words, "examples_per_setting": args.examples,
               "overall": overall, "against_bm25@300": comparisons,
               "per_setting": {k: {s: {f: v for f, v in d.items() if f != "verdicts"} for s, d in per.items()}
                               for k, per in results.items()}}
    (args.out / "evidence_recall.json").write_text(json.dumps(summary, indent=1))
    (args.out / "verdicts.json").write_text(json.dumps({k: {s: d["verdicts"] for s, d in per.items()}
                                                        for k, per in results.items()}))
    for key, v in sorted(overall.items(), key=lambda kv: -kv[1]["recall"]):
        c = comparisons.get(key, {})
        print(f"{key:<16} {v['recall']:5.1f}%  n={v['n']}  {v['mean_ms']:7.1f} ms/question  "
              f"vs bm25@300: +{c.get('b_only', 0)} -{c.get('a_only', 0)}")


if __name__ == "__main__":
    main()
