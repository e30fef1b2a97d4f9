"""Flat dense search at a million passages: exact numpy search against the FAISS indexes the library ships.

The flat baseline's first stage searches every passage's MiniLM vector (``CorpusIndex.flat_search``);
``ragfunnel index --flat --faiss KIND`` adds a FAISS index that reads only part of them. Issue 17's target
for an approximate index: recall@10 ≥ 0.95 at ≤ 0.1× exact search's p50 latency. Embedding a million
passages with MiniLM takes hours on two cores, so the passages here are synthetic 384-d unit vectors
(MiniLM's dimensions), stored and memory-mapped as ``flat.vectors.npy`` is in an index.

Why clustered vectors. Exact search costs the same whatever the vectors hold, but an approximate index
works only where vectors have neighbourhoods. Uniform random unit vectors in 384 dimensions have none
(every pair's cosine is 0 ± 0.05), and every approximate index loses recall on them: over 50,000 of
them the library's HNSW found 39% of exact search's top 10 and its IVF 17%, against 100% for both on
the vectors here. Real embeddings do not look like that. The vectors here are a
two-level mixture of Gaussians on the sphere: topics (unit centres drawn at random, ``TOPIC_SIZE`` = 200
vectors each on average), groups within a topic (centre = topic + ``SPREAD`` × a random direction,
``GROUP_SIZE`` = 10 vectors each on average) and each vector = its group's centre + ``NOISE`` × a random
direction, normalised. Rows pick their group at random, so groups are scattered over the file (an index
sees no ordered input) and vary in size (Poisson-like, as topics do). The group centres are written to a
memory-mapped file too (a tenth of the vectors' size), so memory stays bounded at any ``--passages``.

How the noise was chosen. On the 1,371 real MiniLM passage vectors of the HotpotQA index
(``benchmarks/out/funnel/hotpotqa/index/flat.vectors.npy``) a passage's nearest neighbour has cosine 0.61,
its 10th 0.32, its 100th 0.16, and a random pair 0.02: a few close neighbours, then a graded topic, then
nothing. With ``SPREAD``² = 1.5 and ``NOISE``² = 2.5 (offsets are Gaussian with those expected squared
norms), the expected cosine of two vectors is (1 + 1.5) / 5 = 0.5 in the same group, 1 / 5 = 0.2 in the
same topic and 0 otherwise; measured for held-out queries over 20,000 of these vectors: nearest 0.55,
10th 0.39, 100th 0.21, median 0.00. The same shape, so a query's top 10 are its group (and, for a small
group, the nearest of its topic), which is what an index must find. Group and topic sizes are fixed,
not their counts, so this neighbourhood shape is the same at 5,000 vectors as at 5M. One level (centre +
noise) cannot give it: with the noise set for a nearest neighbour of 0.61 and clusters of 200, the 10th
is 0.58 and the 100th 0.53, a top 10 hardly nearer than the rest of its cluster.
Queries are ``--queries`` held-out vectors drawn from the same mixture (not rows of the index).

What is measured, per kind (``--kinds``, exact always, as the reference):

``exact``          ``ragfunnel.corpus.index.nearest`` over the memory-mapped vectors (``search --flat --exact``)
``flat`` ``hnsw``  ``faiss_search.build`` with the library's default parameters for this size, then
``ivf`` ``ivfpq``  ``FaissIndex(...).search(query, 10, vectors=...)``: FAISS's candidates re-scored exactly
                   from the vectors, as ``search --flat`` does (IVF-PQ asks FAISS for ``refine`` × 10)

build seconds, the FAISS file's size, opening costs, per-query p50/p95 latency (one query at a time, top
10; the first query is reported apart, as in ``index_scale.py``), recall@10 against exact search's top 10
on the same queries, p50 / exact p50, whether the target is met, and the peak resident memory while the
kind was built and searched (``VmHWM``, which counts memory-mapped vector pages read).

Opening. ``CorpusIndex`` checks the SHA-256 of every file listed in the manifest when an index is opened,
``flat.vectors.npy`` and ``flat.faiss`` included. This script builds the FAISS file directly with
``faiss_search.build`` and bypasses the manifest, so it times the parts apart: ``checksum_seconds`` is
``file_sha256`` of the kind's file (the vectors' file for ``exact``, which every kind pays on top of its
own), and ``open_seconds`` is ``FaissIndex(...)`` (``np.load`` with ``mmap_mode`` for ``exact``). Both are
warm-cache numbers: the files were just written, so they are in the page cache.

Threads. ``--threads N`` sets FAISS's OpenMP threads and numpy's OpenBLAS threads (read when numpy is
imported, so the script restarts itself with ``OPENBLAS_NUM_THREADS`` set); by default both use every
core, as ``ragfunnel search`` does. The counts are recorded with the machine.

Also, as before, the flat baseline's first stage next to FunnelRAG's: exact search for the top
``CANDIDATES`` of random unit queries plus the bundled MiniLM embedding of real HotpotQA questions
(``../shared``), merged under the key ``"PASSAGES"`` and printed next to the cluster-BM25 latency the index
benchmark recorded (``--no-embed`` skips it). The comparison is merged under ``"KIND-PASSAGES"`` keys of
``benchmarks/results/flat_search_scale.json``; other entries are kept.

    .venv/bin/python benchmarks/flat_search_scale.py                          # 1,000,000 passages
    .venv/bin/python benchmarks/flat_search_scale.py --passages 5000000 --kinds exact,ivf,ivfpq
    .venv/bin/python benchmarks/flat_search_scale.py --passages 50000 --threads 1 --no-embed
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from index_scale import git_commit, latency_ms, reset_rss_peak, rss_peak_bytes  # the index benchmark's measures
from ragfunnel.corpus.index import nearest
from ragfunnel.corpus.index_manifest import file_sha256
from ragfunnel.retrieve import faiss_search

HERE = Path(__file__).resolve().parent
QUESTIONS = HERE.parents[1] / "shared" / "data" / "hotpotqa_train_hipporag" / "hotpotqa_train.json"
DIMENSIONS = 384  # all-MiniLM-L6-v2
CANDIDATES = 16  # as funnel_vs_flat.py's flat baseline hands its re-ranker
INDEX_ENTRY = "numpy-bm25-1000000"  # index_scale.json's 1M-passage run
K = 10  # recall@10, as issue 17 asks
TARGET_RECALL, TARGET_RATIO = 0.95, 0.1  # issue 17: recall@10 ≥ 0.95 at ≤ 0.1× exact's p50
KINDS = ("exact", *faiss_search.KINDS)
DEFAULT_KINDS = ("exact", "flat", "hnsw", "ivf")
SEARCH_PARAMETER = {"hnsw": "ef_search", "ivf": "nprobe", "ivfpq": "nprobe"}  # set per search, not at build
TOPIC_SIZE = 200  # vectors per topic, on average
GROUP_SIZE = 10  # vectors per group within a topic, on average
SPREAD = math.sqrt(1.5)  # norm of a group centre's offset from its topic (see the module notes)
NOISE = math.sqrt(2.5)  # norm of a vector's offset from its group centre
BLOCK = 100_000  # rows generated at a time


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def write_group_centres(path: Path, groups: int, seed: int) -> np.ndarray:
    """The (not normalised) centres of ``groups`` groups, ``TOPIC_SIZE // GROUP_SIZE`` to a topic, memory-mapped."""
    rng = np.random.default_rng([seed, 0])
    topics = unit(rng.standard_normal((max(1, groups * GROUP_SIZE // TOPIC_SIZE), DIMENSIONS), dtype=np.float32))
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(groups, DIMENSIONS))
    for start in range(0, groups, BLOCK):
        count = min(BLOCK, groups - start)
        offsets = rng.standard_normal((count, DIMENSIONS), dtype=np.float32) * np.float32(SPREAD / DIMENSIONS**0.5)
        out[start:start + count] = topics[np.arange(start, start + count) % len(topics)] + offsets
    out.flush()
    return np.load(path, mmap_mode="r")


def draw(centres: np.ndarray, rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` unit vectors of the mixture: a random group's centre plus noise, normalised."""
    noise = rng.standard_normal((count, DIMENSIONS), dtype=np.float32) * np.float32(NOISE / DIMENSIONS**0.5)
    return unit(centres[rng.integers(len(centres), size=count)] + noise)


def write_vectors(path: Path, centres: np.ndarray, n: int, seed: int) -> None:
    """``n`` vectors of the mixture as a float32 .npy, written block by block (memory stays one block)."""
    rng = np.random.default_rng([seed, 1])
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, DIMENSIONS))
    for start in range(0, n, BLOCK):
        out[start:start + min(BLOCK, n - start)] = draw(centres, rng, min(BLOCK, n - start))
    out.flush()
    del out


@dataclass(frozen=True)
class KindResult:
    """One kind's numbers over one set of vectors and queries (``flat_search_scale.json``'s ``KIND-PASSAGES``)."""

    kind: str
    passages: int
    params: dict[str, int]  # the library's defaults for this size ({} for exact and flat)
    build_seconds: float  # 0 for exact: it searches the vectors' file as it is
    index_bytes: int  # the FAISS file (the vectors' file for exact; every kind needs it too)
    checksum_seconds: float  # SHA-256 of that file, as CorpusIndex checks it at open
    open_seconds: float  # FaissIndex(...), or np.load(mmap_mode="r") for exact
    search: dict[str, float]  # queries, first_query_ms, p50_ms, p95_ms, max_ms
    recall_at_10: float  # mean over the queries of |top 10 ∩ exact top 10| / 10
    p50_ratio: float  # p50 / exact's p50
    meets_target: bool | None  # recall ≥ 0.95 and ratio ≤ 0.1; None for exact, the reference
    build_peak_rss_bytes: int  # while building (0 for exact): the index in memory plus the vector pages read
    search_peak_rss_bytes: int  # while opening and searching, vector pages read included
    context: dict = field(default_factory=dict)  # vectors, threads, machine: shared by the run's entries

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}; valid: {', '.join(KINDS)}")


@dataclass(frozen=True)
class Measured:
    """One kind's build and opening costs, and what its searches gave: seconds per query and the rows found."""

    params: dict[str, int]
    build_seconds: float
    build_peak_rss_bytes: int
    index_bytes: int
    checksum_seconds: float
    open_seconds: float
    seconds: list[float]
    rows: list[np.ndarray]
    search_peak_rss_bytes: int


def timed(function, *args):
    """(what ``function(*args)`` returns, seconds it took)."""
    started = time.perf_counter()
    value = function(*args)
    return value, time.perf_counter() - started


def timed_searches(search, queries: np.ndarray) -> tuple[list[float], list[np.ndarray]]:
    seconds, rows = [], []
    for q in queries:
        (found, _), took = timed(search, q)
        seconds.append(took)
        rows.append(found)
    return seconds, rows


def measure_exact(vectors_path: Path, queries: np.ndarray) -> Measured:
    """``nearest`` over the memory-mapped vectors, as ``CorpusIndex`` searches without FAISS."""
    _, checksum_seconds = timed(file_sha256, vectors_path)
    reset_rss_peak()
    vectors, open_seconds = timed(np.load, vectors_path, "r")  # as CorpusIndex opens flat.vectors.npy
    seconds, rows = timed_searches(lambda q: nearest(vectors, q, K), queries)
    return Measured({}, 0.0, 0, vectors_path.stat().st_size, checksum_seconds, open_seconds, seconds, rows,
                    rss_peak_bytes())


def measure_faiss(kind: str, vectors_path: Path, path: Path, queries: np.ndarray,
                  sweep: Sequence[int] = ()) -> list[Measured]:
    """``faiss_search.build`` then ``FaissIndex.search``, as ``ragfunnel index --flat --faiss KIND`` and
    ``ragfunnel search --flat`` call them (build's training sample seeded as there): searched with the
    library's parameters, then once more for each value of ``sweep`` given to the kind's query-time
    parameter (``SEARCH_PARAMETER``: efSearch for HNSW, nprobe for IVF), on the same built index."""
    reset_rss_peak()
    config, build_seconds = timed(faiss_search.build, np.load(vectors_path, mmap_mode="r"), path, kind)
    build_peak = rss_peak_bytes()
    _, checksum_seconds = timed(file_sha256, path)
    vectors = np.load(vectors_path, mmap_mode="r")
    measured = []
    for value in [None, *(v for v in sweep if v != config.params.get(SEARCH_PARAMETER.get(kind, "")))]:
        setting = config if value is None else replace(config, params=config.params | {SEARCH_PARAMETER[kind]: value})
        reset_rss_peak()  # the build's memory is freed: searching starts from a fresh process's footprint
        index, open_seconds = timed(lambda s=setting: faiss_search.FaissIndex(path, s, rows=len(vectors),
                                                                              dim=vectors.shape[1]))
        seconds, rows = timed_searches(lambda q, i=index: i.search(q, K, vectors=vectors), queries)
        measured.append(Measured(setting.params, build_seconds, build_peak, path.stat().st_size, checksum_seconds,
                                 open_seconds, seconds, rows, rss_peak_bytes()))
    return measured


def recall(rows: list[np.ndarray], truth: list[np.ndarray]) -> float:
    """Mean over the queries of the share of exact search's top ``K`` found."""
    return float(np.mean([len(set(r.tolist()) & set(t.tolist())) / K for r, t in zip(rows, truth, strict=True)]))


def run(passages: int, queries: int, kinds: Sequence[str], *, seed: int, out: Path, threads: int | None = None,
        embed: bool = True, keep: bool = False, sweep: dict[str, Sequence[int]] | None = None) -> dict[str, dict]:
    """Generate the vectors under ``out``, measure every kind (exact first), and return the entries to merge.
    ``sweep`` maps a query-time parameter (``ef_search``, ``nprobe``) to more values to search with."""
    sweep = sweep or {}
    if unknown := sorted(set(kinds) - set(KINDS)):
        raise ValueError(f"unknown kind(s) {', '.join(unknown)}; valid: {', '.join(KINDS)}")
    if queries < 2:
        raise ValueError(f"{queries} queries: at least 2 are needed (the first is reported apart)")
    faiss_threads = None
    if set(kinds) - {"exact"}:
        faiss = faiss_search.import_faiss()  # a missing extra stops here, before any work
        if threads:
            faiss.omp_set_num_threads(threads)
        faiss_threads = faiss.omp_get_max_threads()
    out.mkdir(parents=True, exist_ok=True)
    centres_path, vectors_path = out / f"flat_centres_{passages}.npy", out / f"flat_vectors_{passages}.npy"
    started = time.perf_counter()
    centres = write_group_centres(centres_path, max(1, passages // GROUP_SIZE), seed)
    write_vectors(vectors_path, centres, passages, seed)
    write_seconds = time.perf_counter() - started
    held_out = draw(centres, np.random.default_rng([seed, 2]), queries)
    context = {
        "dimensions": DIMENSIONS, "k": K, "queries": queries, "seed": seed,
        "vectors": {"kind": "clustered", "topics": max(1, passages // TOPIC_SIZE),
                    "groups": len(centres), "spread": round(SPREAD, 4), "noise": round(NOISE, 4)},
        "vectors_bytes": vectors_path.stat().st_size, "write_seconds": round(write_seconds, 1),
        "library_auto_kind": faiss_search.choose_kind(passages, DIMENSIONS,
                                                      memory_bytes=faiss_search.physical_memory()),
        "threads": {"faiss": faiss_threads, "blas": int(os.environ.get("OPENBLAS_NUM_THREADS", os.cpu_count()))},
        "commit": git_commit(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average": os.getloadavg(),
    }
    del centres
    entries: dict[str, dict] = {}
    truth, exact_p50 = None, None
    for kind in ["exact", *(k for k in dict.fromkeys(kinds) if k != "exact")]:
        if kind == "exact":
            runs = [measure_exact(vectors_path, held_out)]
            truth = runs[0].rows
        else:
            index_path = out / f"flat_{kind}_{passages}.faiss"
            runs = measure_faiss(kind, vectors_path, index_path, held_out, sweep.get(SEARCH_PARAMETER.get(kind), ()))
            if not keep:
                index_path.unlink()
        for i, measured in enumerate(runs):
            p50 = statistics.median(measured.seconds[1:])
            exact_p50 = exact_p50 or p50
            found, ratio = recall(measured.rows, truth), p50 / exact_p50
            result = KindResult(
                kind=kind, passages=passages, params=measured.params, build_seconds=round(measured.build_seconds, 2),
                index_bytes=measured.index_bytes, checksum_seconds=round(measured.checksum_seconds, 3),
                open_seconds=round(measured.open_seconds, 4),
                search={"queries": queries - 1, "first_query_ms": round(1000 * measured.seconds[0], 2),
                        **latency_ms(measured.seconds[1:])},
                recall_at_10=round(found, 4), p50_ratio=round(ratio, 4),
                meets_target=None if kind == "exact" else bool(found >= TARGET_RECALL and ratio <= TARGET_RATIO),
                build_peak_rss_bytes=measured.build_peak_rss_bytes,
                search_peak_rss_bytes=measured.search_peak_rss_bytes, context=context)
            name = kind if i == 0 else f"{kind}-{SEARCH_PARAMETER[kind]}{measured.params[SEARCH_PARAMETER[kind]]}"
            entries[f"{name}-{passages}"] = asdict(result)
            print(table_row(entries[f"{name}-{passages}"]), file=sys.stderr, flush=True)  # progress, hours at 5M

    if embed:
        entries[str(passages)] = {
            "passages": passages, "dimensions": DIMENSIONS, "candidates": CANDIDATES, "vectors": "clustered",
            "vectors_bytes": context["vectors_bytes"], "write_seconds": context["write_seconds"],
            **stage_one(np.load(vectors_path, mmap_mode="r"), queries, seed),
            "date": context["date"], "machine": context["machine"], "load_average": os.getloadavg()}
    if not keep:
        vectors_path.unlink()
        centres_path.unlink()
    return entries


def stage_one(vectors: np.ndarray, count: int, seed: int) -> dict:
    """The flat baseline's first stage as measured before: exact top-``CANDIDATES`` search of random unit
    queries (its cost does not depend on the query) and the bundled MiniLM embedding of real questions."""
    from ragfunnel.retrieve.embed import bundled_embedder

    rng = np.random.default_rng(seed + 1)
    queries = unit(rng.standard_normal((count, DIMENSIONS), dtype=np.float32))
    search, _ = timed_searches(lambda q: nearest(vectors, q, CANDIDATES), queries)
    embedder = bundled_embedder()
    texts = questions(count)
    embedder.encode(texts[:1])  # session warm-up, as a long-running `ragfunnel search` has done
    embed = []
    for text in texts:
        started = time.perf_counter()
        embedder.encode([text])
        embed.append(time.perf_counter() - started)
    return {"search": {"queries": count - 1, "first_query_ms": round(1000 * search[0], 2), **latency_ms(search[1:])},
            "query_embedding": {"queries": len(texts), **latency_ms(embed)}}


def questions(count: int) -> list[str]:
    from ragfunnel.eval.datasets import load_dataset

    if QUESTIONS.exists():
        return [e.question for e in load_dataset(QUESTIONS, limit=count).examples]
    return [f"Which city was the founder of company number {i} born in?" for i in range(count)]


def merge(path: Path, entries: dict[str, dict]) -> dict:
    """``entries`` merged into the JSON at ``path`` (entries under other keys kept), written back."""
    results = json.loads(path.read_text()) if path.exists() else {}
    results.update(entries)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")
    return results


def table_row(e: dict) -> str:
    params = ", ".join(f"{k}={v}" for k, v in e["params"].items()) or "–"
    target = {None: "reference", True: "yes", False: "no"}[e["meets_target"]]
    return (f"| {e['kind']} | {params} | {e['build_seconds']:.1f} | {e['index_bytes'] / 2**20:,.0f} | "
            f"{e['checksum_seconds']:.2f} | {e['open_seconds']:.3f} | {e['search']['p50_ms']:.2f} | "
            f"{e['search']['p95_ms']:.2f} | {e['p50_ratio']:.3f} | {e['recall_at_10']:.3f} | "
            f"{e['build_peak_rss_bytes'] / 2**30:.2f} | {e['search_peak_rss_bytes'] / 2**30:.2f} | {target} |")


def table(entries: dict[str, dict]) -> str:
    rows = [e for e in entries.values() if "kind" in e]
    c = rows[0]["context"]
    head = (f"{rows[0]['passages']:,} clustered {c['dimensions']}-d vectors ({c['vectors_bytes'] / 2**30:.2f} GiB), "
            f"{c['queries']} held-out queries, top {c['k']}; threads: FAISS {c['threads']['faiss']}, "
            f"BLAS {c['threads']['blas']}; the library's --faiss auto picks {c['library_auto_kind']}; "
            f"target: recall@10 ≥ {TARGET_RECALL} at p50 ≤ {TARGET_RATIO}× exact")
    lines = ["| kind | parameters | build s | file MiB | checksum s | open s | p50 ms | p95 ms | p50 / exact | "
             "recall@10 | build RSS GiB | search RSS GiB | target |", "|" + "---|" * 13]
    return "\n".join([head, "", *lines, *(table_row(e) for e in rows)])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--kinds", default=",".join(DEFAULT_KINDS),
                        help=f"comma-separated, of {', '.join(KINDS)} (exact always runs: it is the reference)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--threads", type=int, default=None,
                        help="FAISS and numpy (BLAS) threads; default: all cores")
    parser.add_argument("--no-embed", dest="embed", action="store_false",
                        help="skip the MiniLM query-embedding line (the \"PASSAGES\" entry)")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="where the vectors are written (gitignored)")
    parser.add_argument("--results", type=Path, default=HERE / "results" / "flat_search_scale.json")
    parser.add_argument("--keep", action="store_true", help="keep the vector and FAISS files")
    parser.add_argument("--ef-search", default="", help="more HNSW efSearch values to search with, e.g. 256,512")
    parser.add_argument("--nprobe", default="", help="more IVF nprobe values to search with, e.g. 250,500")
    args = parser.parse_args(argv)
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    try:
        args.sweep = {name: [int(v) for v in text.split(",") if v.strip()]
                      for name, text in (("ef_search", args.ef_search), ("nprobe", args.nprobe))}
    except ValueError:
        parser.error("--ef-search and --nprobe take comma-separated whole numbers")
    if unknown := sorted(set(args.kinds) - set(KINDS)):
        parser.error(f"unknown kind(s) {', '.join(unknown)} in --kinds; valid: {', '.join(KINDS)}")
    if args.queries < 2 or args.passages < 1:
        parser.error("--queries must be at least 2 (the first is reported apart) and --passages at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    entries = run(args.passages, args.queries, args.kinds, seed=args.seed, out=args.out, threads=args.threads,
                  embed=args.embed, keep=args.keep, sweep=args.sweep)
    merge(args.results, entries)
    print(table(entries))
    if str(args.passages) in entries:
        entry = entries[str(args.passages)]
        flat = entry["search"]["p50_ms"] + entry["query_embedding"]["p50_ms"]
        print(f"\nflat stage 1 (embed + exact search, top {CANDIDATES}), p50: {flat:.1f} ms")
        index_file = HERE / "results" / "index_scale.json"
        bm25 = json.loads(index_file.read_text()).get(INDEX_ENTRY, {}).get("search") if index_file.exists() else None
        if bm25 and args.passages == 1_000_000:
            print(f"FunnelRAG stage 1 (BM25 over clusters, index_scale.json), p50: {bm25['p50_ms']} ms "
                  f"= {bm25['p50_ms'] / flat:.3f}x flat")


if __name__ == "__main__":
    threads = parse_args().threads
    if threads and os.environ.get("OPENBLAS_NUM_THREADS") != str(threads):
        # OpenBLAS reads its thread count once, when numpy is imported: start again with it set.
        os.environ.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        os.execv(sys.executable, [sys.executable, *sys.argv])
    main()
