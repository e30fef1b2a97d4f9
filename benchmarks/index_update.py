"""What `ragfunnel index --update` costs against a full build, and whether its index equals a fresh build.

One run, alone on the machine: a synthetic corpus (``index_scale.py``'s generator: linked documents of 80-120
pseudo-words) is built in full; then 1% of its documents change (half edited, half added, each added one linked
to existing ones) and 0.2% are removed; the index is updated, and the new corpus is built afresh beside it.
Reported: the three times, the update's share of a full build, which index files differ from the fresh
build's, the largest difference between their vectors, and whether 300 queries get the same top 10 from the
cluster BM25, the document BM25 and (with ``--flat``) exact flat search on both. With ``--flat`` each document
is one passage (``passage_words`` 120 covers its 80-120 words) embedded by the bundled MiniLM.

    .venv/bin/python benchmarks/index_update.py --passages 100000
    .venv/bin/python benchmarks/index_update.py --passages 5000 --flat
    .venv/bin/python benchmarks/index_update.py --passages 100000 --flat --no-fresh-build   # an hour of MiniLM

``--no-fresh-build`` leaves out the fresh build and the comparisons (the update's share is then of the full
build of the corpus before the change, 0.8% smaller).

Results are merged into ``benchmarks/results/index_update.json`` under ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from index_scale import pseudo_word, sample_queries, synthetic_corpus
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_manifest import MANIFEST, IndexConfig
from ragfunnel.corpus.index_update import update_index
from ragfunnel.types import Document

HERE = Path(__file__).resolve().parent
CHANGED, ADDED, REMOVED = 0.005, 0.005, 0.002  # shares of the corpus
TARGET_SHARE = 0.05  # an update of 1% costs at most 5% of a full build


def changed_corpus(docs: list[Document], seed: int) -> tuple[list[Document], dict[str, int]]:
    """``docs`` with CHANGED of them edited, ADDED new ones inserted at random places and REMOVED dropped."""
    rng = np.random.default_rng(seed + 2)
    n = len(docs)
    picks = rng.permutation(n)
    edit, drop = picks[:int(n * CHANGED)], set(picks[int(n * CHANGED):int(n * (CHANGED + REMOVED))].tolist())
    new = list(docs)
    for i in edit.tolist():
        new[i] = replace(new[i], text=new[i].text + " " + docs[int(rng.integers(n))].text)
    kept = [d for i, d in enumerate(new) if i not in drop]
    for k in range(int(n * ADDED)):
        source = docs[int(rng.integers(n))]
        text = " ".join(reversed(source.text.rstrip(".").lower().split())).capitalize() + "."
        added = Document(f"added{k}", f"{pseudo_word(10_000_000 + k).capitalize()} Added", text,
                         tuple(docs[int(j)].title for j in rng.integers(0, n, size=3)))
        kept.insert(int(rng.integers(len(kept) + 1)), added)
    return kept, {"changed": len(edit), "added": int(n * ADDED), "removed": len(drop)}


def timed(work) -> tuple[object, float]:
    started = time.perf_counter()
    result = work()
    return result, round(time.perf_counter() - started, 2)


def differing_files(a: Path, b: Path) -> list[str]:
    fa, fb = (json.loads((d / MANIFEST).read_text())["files"] for d in (a, b))
    return sorted(name for name in set(fa) | set(fb) if fa.get(name) != fb.get(name))


def same_results(updated: CorpusIndex, fresh: CorpusIndex, queries: list[str], flat: bool) -> dict[str, float]:
    """Share of queries whose top 10 (indices, in order) are the same on both indexes, per retrieval."""
    searches = {"cluster BM25": lambda ix, q: ix.cluster_bm25.top_k(q, 10)[0],
                "document BM25": lambda ix, q: ix.document_bm25.top_k(q, 10)[0]}
    if flat:
        searches["flat exact"] = lambda ix, q: ix.flat_search(q, 10, exact=True)[0]
    return {name: float(np.mean([search(updated, q).tolist() == search(fresh, q).tolist() for q in queries]))
            for name, search in searches.items()}


def largest_vector_difference(a: Path, b: Path) -> float | None:
    if not (a / "flat.vectors.npy").exists():
        return None
    return float(np.abs(np.load(a / "flat.vectors.npy") - np.load(b / "flat.vectors.npy")).max())


def run(args: argparse.Namespace) -> dict:
    docs = synthetic_corpus(args.passages, args.seed)
    new, changes = changed_corpus(docs, args.seed)
    config = IndexConfig(flat=True, passage_words=120, faiss="none") if args.flat else IndexConfig()
    out = args.out / "index_update"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    load = os.getloadavg()
    _, full = timed(lambda: build_index(docs, out / "updated", config, source="v1"))
    done, update = timed(lambda: update_index(new, out / "updated", config, source="v2"))
    seconds = {"full build": full, "update": update}
    compared = {}
    if args.fresh_build:
        _, seconds["fresh build of the changed corpus"] = timed(
            lambda: build_index(new, out / "fresh", config, source="v2"))
        queries = sample_queries(lambda i: new[i].text, len(new), args.queries, args.seed)
        compared = {
            "files_differing_from_fresh_build": differing_files(out / "updated", out / "fresh"),
            "largest_vector_difference": largest_vector_difference(out / "updated", out / "fresh"),
            "same_top10_share": same_results(CorpusIndex(out / "updated"), CorpusIndex(out / "fresh"), queries,
                                             args.flat),
            "queries": len(queries),
        }
    share = update / seconds.get("fresh build of the changed corpus", full)
    return {
        "passages": args.passages, "flat": args.flat, "documents_after": len(new), "changes": changes,
        "update_counted": {"added": done.added, "changed": done.changed, "removed": done.removed, "kept": done.kept},
        "seconds": seconds, "update_share_of_a_build": round(share, 4),
        "target_update_at_most_5_percent": share <= TARGET_SHARE, **compared,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_start": [round(x, 2) for x in load]},
        "code": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                               cwd=HERE).stdout.strip(),
        "command": f".venv/bin/python benchmarks/index_update.py --passages {args.passages}"
                   + (" --flat" if args.flat else "") + ("" if args.fresh_build else " --no-fresh-build"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--flat", action="store_true", help="also embed every document as one passage (MiniLM)")
    parser.add_argument("--no-fresh-build", dest="fresh_build", action="store_false",
                        help="time the full build and the update only; no fresh build to compare with")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--label", help="key of this run in the results file (default: passages, and flat)")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="where the indexes are built (gitignored)")
    parser.add_argument("--results", type=Path, default=HERE / "results" / "index_update.json")
    args = parser.parse_args()
    entry = run(args)
    label = args.label or f"{args.passages}" + ("-flat" if args.flat else "")
    results = json.loads(args.results.read_text()) if args.results.exists() else {}
    results[label] = entry
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    shutil.rmtree(args.out / "index_update", ignore_errors=True)
    print(json.dumps(entry, indent=1))


if __name__ == "__main__":
    main()
