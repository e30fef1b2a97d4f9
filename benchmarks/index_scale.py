"""How a FunnelRAG corpus index scales: build time per phase, disk size, peak memory, query latency.

Generates a deterministic synthetic corpus in-process (no corpus file is written): documents
with unique titles, ~100-word texts drawn from a Zipf-distributed vocabulary of pseudo-words,
and 3-6 hyperlinks each to other documents' titles. Most links point to nearby documents (the
corpus order stands for topics), so neighbourhoods are tightly knit and clusters form; a few go
anywhere and a few to popular documents, which become hubs as in Wikipedia. The script then

1. builds the index with ``ragfunnel.corpus.index_build.build_index`` under ``benchmarks/out/`` and
   times each phase by wrapping the functions ``build_index`` calls,
2. opens the index in a fresh process (``CorpusIndex``, checksums verified, as ``ragfunnel
   search`` does) and times BM25 over the clusters, ``cluster_bm25.top_k(query, 80)``, for
   queries of a few words sampled from random documents,

and merges the run into ``benchmarks/results/index_scale.json`` (one entry per ``--label``)
before printing a markdown table of it:

    .venv/bin/python benchmarks/index_scale.py --passages 100000
    .venv/bin/python benchmarks/index_scale.py              # 1,000,000 passages
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

import ragfunnel.corpus.index_build as index_build
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.types import Document

HERE = Path(__file__).resolve().parent
TARGET_BUILD_SECONDS, TARGET_P50_MS = 300.0, 50.0
TOP_CLUSTERS = 80  # what stage 1 of `ragfunnel search` asks for at most

# Pseudo-words: a word's vocabulary rank written in base-70 syllables, so frequent words are short.
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
VOCABULARY = 100_000
ZIPF_EXPONENT = 1.07
LINKS = (3, 6)  # links per document, inclusive
LOCAL, POPULAR = 0.85, 0.03  # shares of links to nearby and to popular documents; the rest go anywhere
LOCAL_SPREAD = 0.15  # geometric parameter of the distance to a nearby document (mean ~6.7)


def pseudo_word(k: int) -> str:
    syllables = []
    while True:
        k, digit = divmod(k, len(_SYLLABLES))
        syllables.append(_SYLLABLES[digit])
        if k == 0:
            return "".join(syllables)


def zipf_sampler(size: int, exponent: float) -> np.ndarray:
    """Cumulative weights of ranks 1..size under Zipf's law, for inverse-CDF sampling."""
    cdf = np.cumsum(1.0 / np.arange(1, size + 1) ** exponent)
    return cdf / cdf[-1]


def synthetic_corpus(n: int, seed: int) -> list[Document]:
    """``n`` documents with titles, Zipf-vocabulary texts and hyperlinks; the same for the same seed."""
    rng = np.random.default_rng(seed)
    # Ranks from 70 on have at least two syllables, so no word is a one-syllable English stopword.
    vocabulary = [pseudo_word(k + len(_SYLLABLES)) for k in range(VOCABULARY)]
    word_cdf = zipf_sampler(VOCABULARY, ZIPF_EXPONENT)
    titles = _titles(n, rng, vocabulary, word_cdf)
    links = _links(n, rng)
    lengths = rng.integers(80, 121, size=n)
    ends = np.cumsum(lengths).tolist()
    docs = []
    for start in range(0, n, 10_000):  # words drawn in blocks: one numpy call per block, not per document
        stop = min(start + 10_000, n)
        first = ends[start - 1] if start else 0
        words = np.searchsorted(word_cdf, rng.random(ends[stop - 1] - first)).tolist()
        for i in range(start, stop):
            text = " ".join([vocabulary[w] for w in words[(ends[i - 1] if i else 0) - first:ends[i] - first]])
            docs.append(Document(f"d{i}", titles[i], text.capitalize() + ".", tuple(titles[j] for j in links[i])))
    return docs


def _titles(n: int, rng: np.random.Generator, vocabulary: list[str], word_cdf: np.ndarray) -> list[str]:
    # The first word is unique (a shuffled document number in syllables); the second is a common word.
    names = rng.permutation(n) + len(_SYLLABLES) ** 2
    common = np.searchsorted(word_cdf, rng.random(n))
    return [f"{pseudo_word(int(a)).capitalize()} {vocabulary[b].capitalize()}"
            for a, b in zip(names.tolist(), common.tolist(), strict=True)]


def _links(n: int, rng: np.random.Generator) -> list[list[int]]:
    """Link targets per document: mostly nearby, some anywhere, a few to Zipf-popular documents."""
    counts = rng.integers(LINKS[0], LINKS[1] + 1, size=n)
    source = np.repeat(np.arange(n), counts)
    kind = rng.random(source.size)
    step = rng.geometric(LOCAL_SPREAD, size=source.size) * rng.choice([-1, 1], size=source.size)
    popular = rng.permutation(n)[np.searchsorted(zipf_sampler(n, 1.0), rng.random(source.size))]
    target = np.where(kind < LOCAL, (source + step) % n,
                      np.where(kind < LOCAL + POPULAR, popular, rng.integers(0, n, size=source.size)))
    out: list[list[int]] = [[] for _ in range(n)]
    for s, t in zip(source.tolist(), target.tolist(), strict=True):
        if t != s and t not in out[s]:
            out[s].append(t)
    return out


def sample_queries(docs_text: Callable[[int], str], n_docs: int, count: int, seed: int) -> list[str]:
    """``count`` queries of 3-6 words, each taken from one random document's text."""
    rng = np.random.default_rng(seed + 1)
    queries = []
    for i in rng.integers(0, n_docs, size=count).tolist():
        words = docs_text(i).rstrip(".").split()
        picks = rng.choice(len(words), size=int(rng.integers(3, 7)), replace=False)
        queries.append(" ".join(words[p] for p in sorted(picks.tolist())))
    return queries


class PhaseTimer:
    """Wall time spent inside chosen functions of ``ragfunnel.corpus.index_build`` while a build runs."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._saved: dict[tuple[object, str], object] = {}  # (module or class, attribute) -> original

    def wrap(self, name: str, phase: str) -> None:
        original = getattr(index_build, name)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - started

        self._saved[index_build, name] = original
        setattr(index_build, name, timed)

    def wrap_bm25(self, phases: list[str]) -> None:
        """Two BM25 indexes are written, over clusters then over documents, from tokens made once:
        time each write, and the joining of document tokens into cluster tokens with the first."""
        write, joined = index_build._write_bm25, index_build.TokenIds.joined
        timer, writes = self, iter(phases)

        def timed_write(tokens, directory):
            phase = next(writes)
            started = time.perf_counter()
            try:
                return write(tokens, directory)
            finally:
                timer.seconds[phase] += time.perf_counter() - started

        @functools.wraps(joined)
        def timed_joined(tokens, groups):
            started = time.perf_counter()
            try:
                return joined(tokens, groups)
            finally:
                timer.seconds[phases[0]] += time.perf_counter() - started

        self._saved[index_build, "_write_bm25"] = write
        self._saved[index_build.TokenIds, "joined"] = joined
        index_build._write_bm25 = timed_write
        index_build.TokenIds.joined = timed_joined

    def restore(self) -> None:
        for (owner, name), original in self._saved.items():
            setattr(owner, name, original)


def rss_peak_bytes() -> int:
    """Peak resident memory of this process since start or the last :func:`reset_rss_peak`."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_now_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def reset_rss_peak() -> None:
    # Linux: writing 5 to clear_refs resets VmHWM, so the build's peak is not the generator's.
    Path("/proc/self/clear_refs").write_text("5")


def timed_build(docs: list[Document], out: Path) -> tuple[dict, dict[str, float], float, int]:
    """Build the index at ``out``: (manifest, seconds per phase, total seconds, peak RSS bytes)."""
    timer = PhaseTimer()
    timer.wrap("content_digests", "content checksums")
    timer.wrap("check_documents", "check documents")
    timer.wrap("write_documents", "write documents")
    timer.wrap("relation_graph", "relation graph")
    timer.wrap("approx_tokens", "document sizes")
    timer.wrap("cluster_documents", "clustering")
    timer.wrap("document_tokens", "tokenise documents (once, for both BM25)")
    timer.wrap_bm25(["BM25 over clusters", "BM25 over documents"])
    timer.wrap("listing", "manifest checksums")
    shutil.rmtree(out, ignore_errors=True)
    reset_rss_peak()
    started = time.perf_counter()
    try:
        manifest = build_index(docs, out, source="synthetic", force=True)
    finally:
        timer.restore()
    total = time.perf_counter() - started
    phases = dict(timer.seconds)
    phases["other"] = total - sum(phases.values())
    return manifest.__dict__, phases, total, rss_peak_bytes()


def latency_ms(seconds: list[float]) -> dict[str, float]:
    """p50, p95 and max of per-query times, in milliseconds."""
    ordered = sorted(seconds)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 2),
            "max_ms": round(ordered[-1] * 1000, 2)}


def measure_queries(root: Path, count: int, seed: int) -> dict:
    """Open the index as `ragfunnel search` does and time BM25 over the clusters per query."""
    started = time.perf_counter()
    index = CorpusIndex(root)
    open_seconds = time.perf_counter() - started
    queries = sample_queries(lambda i: index.document(i).text, len(index), count + 1, seed)
    seconds = []
    for q in queries:
        started = time.perf_counter()
        index.cluster_bm25.top_k(q, TOP_CLUSTERS)
        seconds.append(time.perf_counter() - started)
    return {
        "open_seconds": round(open_seconds, 3),
        "queries": len(seconds) - 1,
        "first_query_ms": round(seconds[0] * 1000, 2),  # tokenizer and stemmer set up once per process
        **latency_ms(seconds[1:]),
        "peak_rss_gib": round(rss_peak_bytes() / 2**30, 3),
        "example_queries": queries[1:4],
    }


def disk_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def git_commit() -> str:
    """The commit measured, naming any library file that differed from it (other work in progress)."""
    run = functools.partial(subprocess.run, cwd=HERE.parent, capture_output=True, text=True, check=False)
    commit = run(["git", "rev-parse", "--short", "HEAD"]).stdout.strip()
    changed = run(["git", "status", "--porcelain", "--", "src"]).stdout.split("\n")
    names = [line[3:] for line in changed if line.strip()]
    return commit + (f" + uncommitted changes to {', '.join(names)}" if names else "")


def machine() -> dict:
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cores": os.cpu_count(), "ram_gib": round(ram / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def run(args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    docs = synthetic_corpus(args.passages, args.seed)
    generate_seconds = time.perf_counter() - started
    corpus_rss = rss_now_bytes()
    out = args.out / f"index_scale_{args.passages}"
    manifest, phases, total, build_peak = timed_build(docs, out)
    del docs
    child = subprocess.run([sys.executable, __file__, "--measure-queries", str(out), "--queries", str(args.queries),
                            "--seed", str(args.seed)], capture_output=True, text=True, check=True)
    queries = json.loads(child.stdout)
    size = disk_bytes(out)
    if not args.keep:
        shutil.rmtree(out)
    return {
        "passages": args.passages,
        "clusters": manifest["clusters"], "edges": manifest["edges"],
        "links_outside": manifest["links_outside"], "oversize_documents": manifest["oversize_documents"],
        "generate_seconds": round(generate_seconds, 2),
        "build_seconds": round(total, 2),
        "phases_seconds": {k: round(v, 2) for k, v in phases.items()},
        "disk_bytes": size,
        "files": {k: v["bytes"] for k, v in manifest["files"].items()},
        "rss_with_corpus_in_memory_gib": round(corpus_rss / 2**30, 3),
        "build_peak_rss_gib": round(build_peak / 2**30, 3),
        "process_peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
        "search": queries,
        "targets": {"build_under_5_min": total < TARGET_BUILD_SECONDS,
                    "query_p50_under_50_ms": queries["p50_ms"] < TARGET_P50_MS},
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "code": git_commit(),
        "command": " ".join([".venv/bin/python", "benchmarks/index_scale.py", *sys.argv[1:]]),
    }


def table(entry: dict) -> str:
    gib = entry["disk_bytes"] / 2**30
    rows = [("passages", f"{entry['passages']:,}"), ("clusters", f"{entry['clusters']:,}"),
            ("edges", f"{entry['edges']:,}"), ("build", f"{entry['build_seconds']:.1f} s"),
            *((f"  {k}", f"{v:.1f} s") for k, v in entry["phases_seconds"].items()),
            ("disk", f"{gib:.2f} GiB"), ("peak RSS (build)", f"{entry['build_peak_rss_gib']:.2f} GiB"),
            ("open index (checksums)", f"{entry['search']['open_seconds']:.1f} s"),
            ("cluster BM25 p50 / p95", f"{entry['search']['p50_ms']:.1f} / {entry['search']['p95_ms']:.1f} ms"),
            ("peak RSS (search)", f"{entry['search']['peak_rss_gib']:.2f} GiB")]
    return "\n".join(["| measure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--label", help="key of this run in the results file (default: the passage count)")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="where the index is built (gitignored)")
    parser.add_argument("--results", type=Path, default=HERE / "results" / "index_scale.json")
    parser.add_argument("--keep", action="store_true", help="keep the built index")
    parser.add_argument("--measure-queries", type=Path, help=argparse.SUPPRESS)  # the child process's job
    args = parser.parse_args()
    if args.measure_queries:
        print(json.dumps(measure_queries(args.measure_queries, args.queries, args.seed)))
        return
    entry = run(args)
    results = json.loads(args.results.read_text()) if args.results.exists() else {}
    results[args.label or str(args.passages)] = entry
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=2) + "\n")
    print(table(entry))


if __name__ == "__main__":
    main()
