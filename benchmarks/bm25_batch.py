"""BM25 top-k for a batch of queries: ragfunnel's ``BM25Index.top_k_many`` against bm25s's ``retrieve``, side
by side in one run, at 20k and 200k texts, single-threaded; query tokenisation counted on both sides.

Texts: passages of the shared HotpotQA and MuSiQue corpora, and beyond their number, texts of two sentences
drawn from them (fixed seed). Queries: the HotpotQA and MuSiQue train questions. Scores are checked equal
to bm25s's (top-10 per query) within 1e-5, bm25s told the same tokenisation (Han runs cut into words).

    .venv/bin/python benchmarks/bm25_batch.py --out benchmarks/results/bm25_batch
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import time
from datetime import date
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from ragfunnel.corpus import load_corpus
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.retrieve.bm25 import SPLIT, BM25Index
from ragfunnel.text.scripts import CHINESE_STOPWORDS, words_for_search

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CORPORA = [SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train_corpus.json",
           SHARED / "musique_train_hipporag" / "musique_train_corpus.json"]
QUESTIONS = [SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train.json",
             SHARED / "musique_train_hipporag" / "musique_train.json"]
K = 10


def texts_of(n: int) -> list[str]:
    passages = [d.render() for path in CORPORA for d in load_corpus(path)]
    if n <= len(passages):
        return passages[:n]
    sentences = [s for p in passages for s in re.split(r"(?<=[.!?])\s+", p) if len(s.split()) > 3]
    rng = random.Random(0)
    return passages + [" ".join(rng.sample(sentences, 2)) for _ in range(n - len(passages))]


def their_tokens(texts: list[str], stemmer: Stemmer.Stemmer) -> bm25s.tokenization.Tokenized:
    """bm25s's own tokenisation, told ragfunnel's choices: Han runs cut into words, one-character Han words kept,
    English and Chinese stopwords (the corpora's Wikipedia passages quote Chinese and Japanese names)."""
    return bm25s.tokenize([words_for_search(t) for t in texts], token_pattern=SPLIT, stemmer=stemmer,
                          stopwords=[*STOPWORDS_EN, *CHINESE_STOPWORDS], show_progress=False)


def run(n: int, queries: list[str], repeats: int) -> dict:
    texts = texts_of(n)
    ours = BM25Index(texts)
    stemmer = Stemmer.Stemmer("english")
    theirs = bm25s.BM25(method="lucene")
    theirs.index(their_tokens(texts, stemmer), show_progress=False)
    timings: dict[str, list[float]] = {"ragfunnel": [], "bm25s": []}
    for i in range(repeats):
        for name in (("ragfunnel", "bm25s") if i % 2 == 0 else ("bm25s", "ragfunnel")):
            started = time.perf_counter()
            if name == "ragfunnel":
                _, our_scores = ours.top_k_many(queries, K)
            else:
                tokens = their_tokens(queries, stemmer)
                _, their_scores = theirs.retrieve(tokens, k=K, show_progress=False, n_threads=1)
            timings[name].append(time.perf_counter() - started)
    worst = float(np.max(np.abs(our_scores - their_scores)))
    medians = {name: statistics.median(t) for name, t in timings.items()}
    return {"texts": n, "queries": len(queries), "k": K, "repeats": repeats,
            **{f"{name}_median_seconds": round(m, 4) for name, m in medians.items()},
            **{f"{name}_queries_per_second": round(len(queries) / m, 1) for name, m in medians.items()},
            "throughput_ratio": round(medians["bm25s"] / medians["ragfunnel"], 3),
            "max_score_difference": worst, "scores_equal_within_1e-5": worst <= 1e-5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20000,200000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/bm25_batch"))
    args = parser.parse_args()
    queries = [e.question for path in QUESTIONS for e in load_dataset(path).examples]
    result = {"date": str(date.today()), "bm25s": bm25s.__version__,
              "runs": [run(int(n), queries, args.repeats) for n in args.sizes.split(",")]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bm25_batch.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
