"""How many of BM25's best chunks must MiniLM read? Evidence recall of the shared ranking over long contexts, with
the dense half limited to BM25's best K chunks, for several K, with no LLM.

Over a context of more than :data:`ragfunnel.retrieve.ranking.DENSE_MAX_CHUNKS` chunks the shared ranking
(:func:`ragfunnel.retrieve.ranking.question_scores`) embeds only BM25's best chunks: on a book, embedding is
most of the work outside the answer's writing. Each K here is that limit; the chunks kept within ``--budget``
tokens (as OP-RAG keeps them) are judged as ``benchmarks/evidence_recall.py`` judges them (the evidence read).
Contexts: HotpotQA and MuSiQue train questions (HippoRAG's files) and AMOR's HotpotQA hidden among their corpus'
passages to ``--context-words``, and the English LongBench dev documents longer than the largest K's chunks.
Each question's pieces are embedded once (the largest K's); the smaller Ks read from the same vectors.

    .venv/bin/python benchmarks/dense_candidates.py --examples 20 --out benchmarks/results/dense_candidates
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evidence_recall import judged, settings  # noqa: E402
from ragfunnel.llm import DEFAULT_STRONG, resolve  # noqa: E402
from ragfunnel.methods.base import select_within_budget  # noqa: E402
from ragfunnel.retrieve.ranking import bm25_scores, dense_scores, hybrid  # noqa: E402
from ragfunnel.text import chunk_words  # noqa: E402

WINDOW = 100  # words per chunk: the methods' default


def measure(examples: dict, ks: list[int], *, budget: int) -> dict:
    strong = resolve(DEFAULT_STRONG)
    verdicts: dict[int, dict[str, list]] = {k: {} for k in ks}
    seconds = {"embed_largest": 0.0, "questions": 0}
    for name, rows in examples.items():
        for e in rows:
            chunks = chunk_words(e.context or "", chunk_words=WINDOW)
            if len(chunks) <= max(ks):
                continue
            bm25 = bm25_scores(e.question, chunks)
            order = np.argsort(-bm25, kind="stable")
            began = time.perf_counter()
            dense_scores(e.question, chunks, only=order[:max(ks)])  # embeds every piece the Ks need, once
            seconds["embed_largest"] += time.perf_counter() - began
            seconds["questions"] += 1
            for k in ks:
                scores = hybrid(bm25, dense_scores(e.question, chunks, only=order[:k]))
                kept = select_within_budget(chunks, scores, budget=budget, llm=strong)
                verdicts[k].setdefault(name, []).append(judged(e, [sc.chunk.position for sc in kept], chunks, WINDOW))
        print(f"{name}: " + "  ".join(f"K={k} {sum(map(bool, verdicts[k].get(name, [])))}/"
                                      f"{len(verdicts[k].get(name, []))}" for k in ks), flush=True)
    return {"verdicts": verdicts, "seconds": seconds}


def paired(a: dict[str, list], b: dict[str, list]) -> dict:
    """Questions where ``b`` read the evidence and ``a`` did not, and the reverse."""
    pairs = [(x, y) for name in a for x, y in zip(a[name], b[name], strict=True) if x is not None and y is not None]
    return {"n": len(pairs), "b_only": sum(bool(y and not x) for x, y in pairs),
            "a_only": sum(bool(x and not y) for x, y in pairs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=20, help="questions per setting")
    parser.add_argument("--context-words", type=int, default=30000)
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--ks", default="16,32,48,64,96,128,192", help="how many of BM25's best chunks MiniLM reads")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/dense_candidates"))
    args = parser.parse_args()
    ks = sorted(int(k) for k in args.ks.split(","))
    found = measure(settings(args.examples, args.context_words), ks, budget=args.budget)
    largest = max(ks)
    summary = {"date": str(date.today()), "machine": platform.machine(), "budget": args.budget,
               "context_words": args.context_words, "examples_per_setting": args.examples,
               "questions": found["seconds"]["questions"],
               "embed_seconds_per_question_at_largest": round(found["seconds"]["embed_largest"]
                                                              / max(1, found["seconds"]["questions"]), 2),
               "recall": {}, f"against_K={largest}": {}}
    for k in ks:
        known = [v for vs in found["verdicts"][k].values() for v in vs if v is not None]
        summary["recall"][k] = {"evidence_read": sum(known), "n": len(known),
                                "percent": round(100 * sum(known) / len(known), 1) if known else None}
        summary[f"against_K={largest}"][k] = paired(found["verdicts"][largest], found["verdicts"][k])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dense_candidates.json").write_text(json.dumps({**summary, "verdicts": found["verdicts"]}, indent=1))
    for k in ks:
        r, c = summary["recall"][k], summary[f"against_K={largest}"][k]
        print(f"K={k:<4} {r['percent']}%  n={r['n']}  vs K={largest}: +{c['b_only']} -{c['a_only']}")


if __name__ == "__main__":
    main()
