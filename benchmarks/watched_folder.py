"""A watched folder (`index DIR --watch`, `serve --watch`) against issue 45's targets: one run, alone on the machine.

(a) A file dropped into a watched folder: seconds from its write until a newly opened index (as ``serve`` opens
    each update's) finds its unique word, less the update's own seconds (reading and indexing it): what the
    watch adds, the debounce included. Target: at most 5 s. Repeated ``--drops`` times, a text file each (and a
    real PDF of ``../shared/data/documents_real`` when there is one, to show a slower reading is not counted).
(b) ``--burst`` files (1,000) written at once into the watched folder: how many updates apply them. Target: 1.
(c) ``kill -9`` of ``ragfunnel index DIR --out IDX --watch`` during an update, at three moments of its write
    of ``IDX.partial``: the old index still opens (every file checked against its manifest), and the next run
    (whose rescan applies what the killed one left undone) completes; the last holds what a fresh build of
    the folder holds.

The index is built with the default settings (BM25 and clusters, nothing embedded), so no model loads.

    .venv/bin/python benchmarks/watched_folder.py

Results are merged into ``benchmarks/results/watched_folder.json`` under ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from ragfunnel.corpus import load_corpus
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.watch import Debounce, WatchedFolder, WatchStatus

HERE = Path(__file__).resolve().parent
SHARED_PDFS = HERE.parents[1] / "shared" / "data" / "documents_real" / "pdf"
TARGET_SECONDS = 5.0
WORDS = ("harbour lighthouse granite keeper gannet puffin cliff storm lantern ferry tide beacon quarry chapel orchard "
         "mill bridge river meadow falcon heron salmon barley copper tin wool loom forge anvil").split()


def write_notes(folder: Path, names: range, prefix: str) -> None:
    """A text file per number: a few sentences from a small vocabulary and a word of its own."""
    for i in names:
        words = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(40))
        (folder / f"{prefix}{i:05d}.txt").write_text(f"Note {i}. The keeper wrote of {words}. Its mark: "
                                                     f"{prefix}mark{i}.\n")


def finds(index_dir: Path, word: str) -> bool:
    index = CorpusIndex(index_dir)
    try:
        return bool(index.search_documents(word, 1))
    finally:
        index.close()


class Watching:
    """A WatchedFolder on its thread, with every status its updates report kept, and when."""

    def __init__(self, folder: Path, index_dir: Path, debounce: Debounce | None = None):
        self.reports: list[tuple[float, WatchStatus]] = []
        self.changed = threading.Condition()
        self.watched = WatchedFolder(folder, index_dir, debounce=debounce, on_update=self.told)

    def told(self, status: WatchStatus) -> None:
        with self.changed:
            self.reports.append((time.monotonic(), status))
            self.changed.notify_all()

    def wait_for(self, test, timeout: float = 600) -> tuple[float, WatchStatus]:
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for when, status in self.reports:
                    if test(status):
                        return when, status
                if not self.changed.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"no update met the test within {timeout:g} s: {self.watched.status()}")

    def __enter__(self) -> Watching:
        self.watched.start()
        self.wait_for(lambda s: s.ready and s.progress is None)
        return self

    def __exit__(self, *exc) -> None:
        self.watched.stop(wait=10)


def held(status: WatchStatus, name: str) -> bool:
    return any(f.name == name for f in status.files)


def dropped(work: Path, drops: int, base: int) -> dict:
    """(a): a file at a time dropped in, until a newly opened index finds it."""
    folder = work / "drop"
    folder.mkdir()
    write_notes(folder, range(base), "base")
    rows = []
    pdfs = sorted(SHARED_PDFS.glob("*.pdf"))[:1] if SHARED_PDFS.is_dir() else []
    with Watching(folder, work / "drop.ix") as watching:
        for k in range(drops + len(pdfs)):
            time.sleep(2.0)  # the folder quiet, as between two drops by a person
            if k < drops:
                name, word = f"drop{k}.txt", f"dropmark{k}"
                written = time.monotonic()
                (folder / name).write_text(f"A note dropped in: {word} by the harbour.\n")
            else:
                source = pdfs[k - drops]
                name, word = f"drop{k}.pdf", None
                written = time.monotonic()
                shutil.copyfile(source, folder / name)
            _, status = watching.wait_for(lambda s, name=name: held(s, name) or any(f.name == name for f in s.failed))
            if word is not None:
                while not finds(work / "drop.ix", word):  # opened as serve opens each update's index
                    time.sleep(0.01)
            searchable = time.monotonic() - written
            update = status.last_update.seconds
            rows.append({"file": name, "bytes": (folder / name).stat().st_size, "seconds_to_searchable":
                         round(searchable, 3), "update_seconds": update,
                         "seconds_less_indexing": round(searchable - update, 3),
                         "update": status.last_update.describe()})
            print(rows[-1], flush=True)
    overhead = [r["seconds_less_indexing"] for r in rows]
    return {"base_files": base, "drops": rows, "median_seconds_less_indexing": round(statistics.median(overhead), 3),
            "max_seconds_less_indexing": max(overhead), "target_seconds": TARGET_SECONDS,
            "target_met": max(overhead) <= TARGET_SECONDS}


def burst(work: Path, files: int, base: int) -> dict:
    """(b): ``files`` written at once; the updates that apply them."""
    folder = work / "burst"
    folder.mkdir()
    write_notes(folder, range(base), "base")
    with Watching(folder, work / "burst.ix") as watching:
        before = watching.watched.status().updates
        started = time.monotonic()
        write_notes(folder, range(files), "burst")
        written = time.monotonic() - started
        when, status = watching.wait_for(lambda s: s.documents == base + files and s.progress is None)
        time.sleep(3 * watching.watched.debounce.quiet + 1)  # a late second update would show by now
        status = watching.watched.status()
        updates = status.updates - before
    return {"base_files": base, "files_written": files, "seconds_to_write_them": round(written, 3),
            "seconds_until_all_indexed": round(when - started, 3), "updates": updates,
            "update": status.last_update.describe(), "target_updates": 1, "target_met": updates == 1}


def killed(work: Path, base: int, added: int) -> dict:
    """(c): the watch killed at three moments of an update; the old index checked each time; then a run to the end."""
    folder, index_dir = work / "kill", work / "kill.ix"
    folder.mkdir()
    write_notes(folder, range(base), "base")
    WatchedFolder(folder, index_dir).rescan()
    command = [sys.executable, "-m", "ragfunnel", "index", str(folder), "--out", str(index_dir), "--watch"]
    kills = []
    for round_, wait_for in enumerate(("documents.jsonl", "documents.tokens/terms.json",
                                       "clusters.bm25/params.index.json")):
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in process.stderr:  # its rescan applied what the last killed run left undone
            if line.startswith("watching"):
                break
        expected = CorpusIndex(index_dir).manifest
        write_notes(folder, range(round_ * added, (round_ + 1) * added), "added")
        partial = index_dir.with_name(index_dir.name + ".partial") / wait_for
        deadline = time.monotonic() + 300
        while not partial.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        process.stderr.close()
        try:
            opened = CorpusIndex(index_dir).manifest == expected
        except Exception as e:  # noqa: BLE001 - a failure to open is the result to report
            opened = f"{type(e).__name__}: {e}"
        kills.append({"killed_once_written": wait_for, "killed_during_the_update": process.returncode == -9
                      and partial.parent.exists(), "old_index_opens_unchanged": opened})
        print(kills[-1], flush=True)
    started = time.monotonic()
    status = WatchedFolder(folder, index_dir).rescan()  # the next run
    seconds = time.monotonic() - started
    build_index(load_corpus(folder), work / "kill.fresh", source=str(folder.resolve()))
    same = CorpusIndex(index_dir).manifest.content_sha256 == CorpusIndex(work / "kill.fresh").manifest.content_sha256
    return {"base_files": base, "added_before_each_kill": added, "kills": kills,
            "next_run": {"seconds": round(seconds, 3), "update": status.last_update.describe(),
                         "documents": status.documents, "equals_a_fresh_build": same},
            "target_met": all(k["old_index_opens_unchanged"] is True for k in kills) and same
                          and status.documents == base + 3 * added}


def run(args: argparse.Namespace) -> dict:
    work = args.out / "watched_folder"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    load = os.getloadavg()
    try:
        parts = {"dropped_file": dropped(work, args.drops, args.base),
                 "burst": burst(work, args.burst, args.base),
                 "kill": killed(work, args.kill_base, args.kill_added)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {**parts, "all_targets_met": all(p["target_met"] for p in parts.values()),
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                        "load_average_at_start": [round(x, 2) for x in load]},
            "code": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                   cwd=HERE).stdout.strip(),
            "command": " ".join([".venv/bin/python benchmarks/watched_folder.py", *sys.argv[1:]])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=2000, help="files in the folder before (a) and (b)")
    parser.add_argument("--drops", type=int, default=5, help="(a): text files dropped in, one at a time")
    parser.add_argument("--burst", type=int, default=1000, help="(b): files written at once")
    parser.add_argument("--kill-base", type=int, default=5000, help="(c): files in the folder before the kills")
    parser.add_argument("--kill-added", type=int, default=2000, help="(c): files added before each kill")
    parser.add_argument("--label", default="default")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="where the folders are written (gitignored)")
    parser.add_argument("--results", type=Path, default=HERE / "results" / "watched_folder.json")
    args = parser.parse_args()
    entry = run(args)
    results = json.loads(args.results.read_text()) if args.results.exists() else {}
    results[args.label] = entry
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(entry, indent=1))


if __name__ == "__main__":
    main()
