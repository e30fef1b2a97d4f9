"""Files replaced whole or not at all: the new bytes land, the old ones stay on any error, and no temporary
file is left behind."""

from __future__ import annotations

import os
import stat

import pytest

from ragfunnel import atomic
from ragfunnel.atomic import atomic_open, write_atomic


def names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_writes_text_and_bytes_and_replaces_what_was_there(tmp_path):
    path = tmp_path / "f.json"
    write_atomic(path, "première")
    assert path.read_text(encoding="utf-8") == "première"
    write_atomic(path, b"\x00\xff")
    assert path.read_bytes() == b"\x00\xff"
    assert names(tmp_path) == ["f.json"]


def test_streamed_writes_land_only_when_the_block_ends(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("old\n")
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write("new 1\n")
        f.flush()
        assert path.read_text() == "old\n"  # a reader meanwhile sees the old file whole, never half the new one
        f.write("new 2\n")
    assert path.read_text() == "new 1\nnew 2\n"
    assert names(tmp_path) == ["rows.jsonl"]


def test_an_error_keeps_the_old_file_and_removes_the_temporary_one(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_open(path) as f:
        f.write(b"half of the new")
        raise RuntimeError("stopped mid-write")
    assert path.read_bytes() == b"old"
    assert names(tmp_path) == ["f.bin"]


def test_an_interrupt_is_cleaned_up_too(tmp_path):
    path = tmp_path / "f.bin"
    with pytest.raises(KeyboardInterrupt), atomic_open(path) as f:
        f.write(b"x")
        raise KeyboardInterrupt
    assert names(tmp_path) == []


def test_a_failed_rename_removes_the_temporary_file(tmp_path):
    path = tmp_path / "taken"
    path.mkdir()
    (path / "inside").write_text("a folder is in the way")
    with pytest.raises(OSError):
        write_atomic(path, "text")
    assert names(tmp_path) == ["taken"]


def test_a_missing_folder_is_an_os_error_and_leaves_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "absent" / "f.json", "{}")
    assert names(tmp_path) == []


def test_writers_of_one_target_never_share_a_temporary_file(tmp_path):
    path = tmp_path / "ledger.json"
    with atomic_open(path, "w") as first, atomic_open(path, "w") as second:
        assert first.name != second.name
        first.write("first")
        second.write("second")
    assert path.read_text() == "first"  # the outer block ends last: its file is the one that stays
    assert names(tmp_path) == ["ledger.json"]


def test_a_stale_temporary_name_is_skipped(tmp_path, monkeypatch):
    drawn = iter(["aaaa", "aaaa", "bbbb"])
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda n: next(drawn))
    stale = tmp_path / f"f.{os.getpid()}.aaaa.partial"
    stale.write_text("left by a killed writer")
    write_atomic(tmp_path / "f", "new")
    assert (tmp_path / "f").read_text() == "new"
    assert stale.read_text() == "left by a killed writer"  # never opened, never removed: not ours


def test_fsync_only_when_asked(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(atomic.os, "fsync", synced.append)
    write_atomic(tmp_path / "a", "x")
    assert synced == []
    write_atomic(tmp_path / "b", "x", fsync=True)
    assert len(synced) == 1


def test_permissions_are_those_of_a_plain_write(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("x")
    write_atomic(tmp_path / "atomic", "x")
    assert stat.S_IMODE((tmp_path / "atomic").stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)


def test_only_whole_file_modes_are_accepted(tmp_path):
    with pytest.raises(ValueError, match="mode"), atomic_open(tmp_path / "f", "a"):
        pass
    assert names(tmp_path) == []
