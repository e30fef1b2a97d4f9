"""A watched folder keeps its index current: a rescan at start, each burst of file events one update (a fake clock
drives the debounce), a file that cannot be read listed with its reason while the others are indexed, files
added and removed, a kill during an update leaving the old index, and `index --watch`'s refusals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import ragfunnel.corpus.watch as watch
from ragfunnel.corpus import load_corpus
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_update import update_index
from ragfunnel.corpus.watch import Debounce, WatchedFolder, require_watchfiles
from ragfunnel.errors import MissingExtra
from tests.helpers.cli import invoke, one_line


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def notes(folder: Path, words: dict[str, str]) -> Path:
    """``folder`` holding a text file per name, each a sentence with its own word."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, word in words.items():
        (folder / name).write_text(f"The keeper's note mentions the {word} by the harbour.\n")
    return folder


def titles_with(index_dir: Path, word: str) -> list[str]:
    index = CorpusIndex(index_dir)
    try:
        return [doc.title for doc, _ in index.search_documents(word, 5)]
    finally:
        index.close()


def test_the_debounce_waits_for_quiet_or_the_longest_wait():
    clock = FakeClock()
    debounce = Debounce(quiet=0.75, longest=5.0, clock=clock)
    assert not debounce.due()
    debounce.add(["a.txt"])
    clock.now += 0.5
    assert not debounce.due()
    clock.now += 0.3
    assert debounce.due()  # quiet for 0.8 s
    debounce.add(["b.txt"])
    for _ in range(10):  # an event every 0.5 s: never quiet, due once 5 s have passed since the first
        clock.now += 0.5
        debounce.add(["c.txt"])
    assert debounce.due() and debounce.take() == {"a.txt", "b.txt", "c.txt"} and not debounce.due()
    debounce.put_back(["d.txt"], after=30)
    clock.now += 29
    assert not debounce.due()
    clock.now += 1
    assert debounce.due()


def test_a_thousand_file_events_are_one_update(tmp_path, monkeypatch):
    clock = FakeClock()
    folder = notes(tmp_path / "docs", {"first.txt": "gannet"})
    watched = WatchedFolder(folder, tmp_path / "ix", debounce=Debounce(0.75, 5.0, clock=clock))
    watched.rescan()
    updates = []

    def counted(*args, **kwargs):
        updates.append(args)
        return update_index(*args, **kwargs)

    monkeypatch.setattr(watch, "update_index", counted)
    names = [f"note{i:04d}.txt" for i in range(1000)]
    notes(folder, {name: f"word{i}" for i, name in enumerate(names)})
    for start in range(0, 1000, 50):  # the events as a watcher hands them over, 0.1 s apart
        watched.notice(folder / name for name in names[start:start + 50])
        clock.now += 0.1
        assert not watched.poll()
    assert len(watched.status().pending) == 1000
    clock.now += 0.75
    assert watched.poll() and len(updates) == 1
    status = watched.status()
    assert status.updates == 2 and status.pending == () and status.documents == 1001
    assert status.last_update.added == 1000 and len(status.last_update.files_read) == 1000
    assert titles_with(tmp_path / "ix", "word517") == ["note0517.txt"]


def test_events_that_concern_no_document_are_not_pending(tmp_path):
    folder = notes(tmp_path / "docs", {"a.txt": "gannet"})
    (folder / "sub").mkdir()
    watched = WatchedFolder(folder, folder / "ix")  # an index inside the folder it watches
    watched.notice([folder / ".hidden.txt", folder / ".git" / "a.md", folder / "image.xcf", folder / "ix" / "x.txt",
                    tmp_path / "elsewhere.txt", folder / "sub", folder / "sub" / "b.md"])
    assert watched.status().pending == ("sub", "sub/b.md")


def test_a_file_that_cannot_be_read_is_listed_with_its_reason_and_the_rest_are_indexed(tmp_path):
    folder = notes(tmp_path / "docs", {"good.txt": "gannet", "also.md": "puffin"})
    (folder / "empty.txt").write_text("  \n")
    (folder / "broken.pdf").write_bytes(b"not a pdf at all")
    os.mkfifo(folder / "pipe.txt")  # reading it would wait for a writer
    (tmp_path / "secret.txt").write_text("outside the folder")
    (folder / "link.txt").symlink_to(tmp_path / "secret.txt")
    status = WatchedFolder(folder, tmp_path / "ix").rescan()
    assert [(f.name, f.documents) for f in status.files] == [("also.md", 1), ("good.txt", 1)]
    failed = {f.name: f.reason for f in status.failed}
    assert set(failed) == {"broken.pdf", "empty.txt"}
    assert "broken.pdf is named .pdf but is not one" in failed["broken.pdf"]
    assert "empty.txt is empty or whitespace only" in failed["empty.txt"]
    skipped = {f.name: f.reason for f in status.skipped}
    assert set(skipped) == {"pipe.txt", "link.txt"} and "resolves outside" in skipped["link.txt"]
    assert status.ready and status.error is None and CorpusIndex(tmp_path / "ix").manifest.documents == 2
    view = status.to_dict()
    assert view["failed"][0] == {"name": "broken.pdf", "reason": failed["broken.pdf"]} and view["documents"] == 2


def test_an_update_under_way_reports_its_stage_and_the_files_read(tmp_path, monkeypatch):
    folder = notes(tmp_path / "docs", {"a.txt": "gannet", "b.txt": "puffin", "c.txt": "heron"})
    watched = WatchedFolder(folder, tmp_path / "ix")
    seen = []
    read = watch.read_document
    monkeypatch.setattr(watch, "read_document", lambda path, limits: seen.append(watched.status().progress)
                        or read(path, limits))
    indexed = watch.update_index
    monkeypatch.setattr(watch, "update_index", lambda *a, **k: seen.append(watched.status().progress)
                        or indexed(*a, **k))
    assert watched.rescan().progress is None
    assert [(p.stage, p.done, p.total) for p in seen] == [("reading", 0, 3), ("reading", 1, 3), ("reading", 2, 3),
                                                          ("indexing", 0, 0)]


def test_a_file_added_then_removed(tmp_path):
    folder = notes(tmp_path / "docs", {"a.txt": "gannet", "b.txt": "puffin"})
    watched = WatchedFolder(folder, tmp_path / "ix")
    watched.rescan()
    notes(folder / "sub", {"heron.txt": "heron"})
    watched.notice([folder / "sub" / "heron.txt"])
    status = watched.update()
    assert titles_with(tmp_path / "ix", "heron") == [os.path.join("sub", "heron.txt")]
    assert status.last_update.files_read == ("sub/heron.txt",) and status.last_update.added == 1
    (folder / "sub" / "heron.txt").unlink()
    status = watched.update()
    assert titles_with(tmp_path / "ix", "heron") == []
    assert status.last_update.files_removed == ("sub/heron.txt",) and status.last_update.removed == 1
    assert [f.name for f in status.files] == ["a.txt", "b.txt"] and status.updates == 3
    assert watched.update().updates == 3  # nothing changed: no update


def test_the_rescan_on_start_finds_what_changed_while_nobody_watched(tmp_path):
    folder = notes(tmp_path / "docs", {"a.txt": "gannet", "b.txt": "puffin", "c.txt": "heron"})
    WatchedFolder(folder, tmp_path / "ix").rescan()
    (folder / "a.txt").write_text("Rewritten: the keeper saw a falcon.\n")
    (folder / "b.txt").unlink()
    notes(folder, {"d.txt": "salmon"})
    status = WatchedFolder(folder, tmp_path / "ix").rescan()
    done = status.last_update
    assert (done.added, done.changed, done.removed, done.kept) == (1, 1, 1, 1)
    build_index(load_corpus(folder), tmp_path / "fresh", source=str(folder.resolve()))
    updated, fresh = (CorpusIndex(tmp_path / name).manifest for name in ("ix", "fresh"))
    assert updated.content_sha256 == fresh.content_sha256 and updated.documents == 3


def test_a_folder_with_nothing_to_read_yet_writes_no_index_until_it_has(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    watched = WatchedFolder(folder, tmp_path / "ix")
    status = watched.rescan()
    assert not status.ready and status.error is None and status.files == ()
    notes(folder, {"a.txt": "gannet"})
    assert watched.update().ready and titles_with(tmp_path / "ix", "gannet") == ["a.txt"]


def test_the_watcher_applies_a_dropped_file_and_stops(tmp_path):
    folder = notes(tmp_path / "docs", {"a.txt": "gannet"})
    seen = threading.Event()
    watched = WatchedFolder(folder, tmp_path / "ix", debounce=Debounce(0.1, 1.0),
                            on_update=lambda s: seen.set() if any(f.name == "drop.txt" for f in s.files) else None)
    watched.start()
    try:
        deadline = time.monotonic() + 20
        while not watched.status().ready:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        notes(folder, {"drop.txt": "cormorant"})
        assert seen.wait(20), watched.status()
    finally:
        assert watched.stop(wait=5)
    assert titles_with(tmp_path / "ix", "cormorant") == ["drop.txt"]


def test_a_kill_during_an_update_leaves_the_old_index_and_the_next_run_completes(tmp_path):
    folder = notes(tmp_path / "docs", {f"old{i:04d}.txt": f"old{i}" for i in range(1500)})
    WatchedFolder(folder, tmp_path / "ix").rescan()
    expected = CorpusIndex(tmp_path / "ix").manifest
    process = subprocess.Popen([sys.executable, "-m", "ragfunnel", "index", str(folder), "--out",
                                str(tmp_path / "ix"), "--watch"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    try:
        for line in process.stderr:  # the rescan found the index current; the watch is listening
            if line.startswith("watching"):
                break
        notes(folder, {f"new{i:04d}.txt": f"new{i}" for i in range(1500)})
        deadline = time.monotonic() + 60
        while not (tmp_path / "ix.partial" / "documents.jsonl").exists():
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.002)
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL
    finally:
        process.kill()
        process.stderr.close()
    assert CorpusIndex(tmp_path / "ix").manifest == expected  # every file checked
    status = WatchedFolder(folder, tmp_path / "ix").rescan()
    assert status.last_update.added == 1500 and CorpusIndex(tmp_path / "ix").manifest.documents == 3000
    assert not (tmp_path / "ix.partial").exists()


def test_index_watch_refuses_a_file_force_and_json_in_one_line(tmp_path):
    folder = notes(tmp_path / "docs", {"a.txt": "gannet"})
    one_line(invoke("index", folder / "a.txt", "--out", tmp_path / "ix", "--watch"), "is not a folder", code=2)
    one_line(invoke("index", folder, "--out", tmp_path / "ix", "--watch", "--force"), "give one of them", code=2)
    one_line(invoke("index", folder, "--out", tmp_path / "ix", "--watch", "--json"), "give one of them", code=2)
    assert not (tmp_path / "ix").exists()


def test_without_watchfiles_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "watchfiles", None)
    with pytest.raises(MissingExtra, match=r"ragfunnel\[watch\]"):
        require_watchfiles()
    folder = notes(tmp_path / "docs", {"a.txt": "gannet"})
    one_line(invoke("index", folder, "--out", tmp_path / "ix", "--watch"), "pip install 'ragfunnel[watch]'")
    assert not (tmp_path / "ix").exists()
