"""What the flat baseline's first stage costs at a million passages, beside FunnelRAG's.

FunnelRAG's time saving comes from not searching every passage: its first stage is BM25 over
clusters (``benchmarks/index_scale.py`` times it at 1M passages), the flat baseline's is exact dense
search over every passage's MiniLM vector (``CorpusIndex.flat_search``). Embedding a million
passages with MiniLM takes hours on two cores, and the cost of exact search does not depend on what
the vectors hold, so this script times the library's own search step
(``ragfunnel.corpus.index.nearest``) over ``--passages`` random unit vectors of MiniLM's 384
dimensions, stored and memory-mapped as ``flat.vectors.npy`` is in an index, plus the real query
embedding (bundled MiniLM, real HotpotQA questions when ``../shared`` is there). It merges the run
into ``benchmarks/results/flat_search_scale.json`` and prints it next to the cluster-BM25 latency
recorded by the index benchmark:

    .venv/bin/python benchmarks/flat_search_scale.py                    # 1,000,000 passages
    .venv/bin/python benchmarks/flat_search_scale.py --passages 100000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from index_scale import latency_ms  # the same percentiles as the cluster-BM25 numbers it is set beside
from ragfunnel.corpus.index import nearest
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.retrieve.embed import bundled_embedder

HERE = Path(__file__).resolve().parent
QUESTIONS = HERE.parents[1] / "shared" / "data" / "hotpotqa_train_hipporag" / "hotpotqa_train.json"
DIMENSIONS = 384  # all-MiniLM-L6-v2
CANDIDATES = 16  # as funnel_vs_flat.py's flat baseline hands its re-ranker
INDEX_ENTRY = "numpy-bm25-1000000"  # index_scale.json's 1M-passage run


def write_vectors(path: Path, n: int, seed: int, block: int = 100_000) -> None:
    """``n`` random unit vectors as a float32 .npy, written block by block (memory stays one block)."""
    rng = np.random.default_rng(seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, DIMENSIONS))
    for start in range(0, n, block):
        v = rng.standard_normal((min(block, n - start), DIMENSIONS), dtype=np.float32)
        out[start:start + len(v)] = v / np.linalg.norm(v, axis=1, keepdims=True)
    out.flush()
    del out


def questions(count: int) -> list[str]:
    if QUESTIONS.exists():
        return [e.question for e in load_dataset(QUESTIONS, limit=count).examples]
    return [f"Which city was the founder of company number {i} born in?" for i in range(count)]


def run(args: argparse.Namespace) -> dict:
    path = args.out / f"flat_vectors_{args.passages}.npy"
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    write_vectors(path, args.passages, args.seed)
    write_seconds = time.perf_counter() - started

    vectors = np.load(path, mmap_mode="r")  # as CorpusIndex opens flat.vectors.npy
    rng = np.random.default_rng(args.seed + 1)
    queries = rng.standard_normal((args.queries, DIMENSIONS), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    search = []
    for q in queries:
        t = time.perf_counter()
        nearest(vectors, q, CANDIDATES)
        search.append(time.perf_counter() - t)

    embedder = bundled_embedder()
    texts = questions(args.queries)
    embedder.encode(texts[:1])  # session warm-up, as a long-running `ragfunnel search` has done
    embed = []
    for text in texts:
        t = time.perf_counter()
        embedder.encode([text])
        embed.append(time.perf_counter() - t)
    if not args.keep:
        path.unlink()
    return {
        "passages": args.passages, "dimensions": DIMENSIONS, "candidates": CANDIDATES,
        "vectors_bytes": args.passages * DIMENSIONS * 4, "write_seconds": round(write_seconds, 1),
        "search": {"queries": args.queries - 1, "first_query_ms": round(1000 * search[0], 2), **latency_ms(search[1:])},
        "query_embedding": {"queries": len(texts), **latency_ms(embed)},
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": f"{platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}", "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=HERE / "out", help="where the vectors are written (gitignored)")
    parser.add_argument("--results", type=Path, default=HERE / "results" / "flat_search_scale.json")
    parser.add_argument("--keep", action="store_true", help="keep the vector file")
    args = parser.parse_args()
    entry = run(args)
    results = json.loads(args.results.read_text()) if args.results.exists() else {}
    results[str(args.passages)] = entry
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    index_file = HERE / "results" / "index_scale.json"
    bm25 = json.loads(index_file.read_text()).get(INDEX_ENTRY, {}).get("search") if index_file.exists() else None
    flat = entry["search"]["p50_ms"] + entry["query_embedding"]["p50_ms"]
    print(json.dumps(entry, indent=1))
    print(f"flat stage 1 (embed + exact search), p50: {flat:.1f} ms")
    if bm25 and args.passages == 1_000_000:
        print(f"FunnelRAG stage 1 (BM25 over clusters, index_scale.json), p50: {bm25['p50_ms']} ms "
              f"= {bm25['p50_ms'] / flat:.3f}x flat")


if __name__ == "__main__":
    main()
