"""One writer at a time for an index folder, and the swap that puts a finished build in its place.

A build or an update of ``DIR`` holds an exclusive lock on ``DIR.lock`` for all of its work
(``journal.exclusive``: the kernel's ``flock``, gone with its process, so a kill leaves no stale lock, and a
second writer is refused in one line naming the holder's PID). It writes into ``DIR.partial`` and swaps that
in through ``DIR.previous`` (:func:`finish_index`). When ``DIR`` is a symbolic link the link stays: the
folder it points to is the one written and swapped, and its siblings sit beside that folder.

What a killed writer leaves (``DIR.partial``, ``DIR.previous``, ``DIR.previous.deleting``) is put back or
removed by the next writer, under the lock. A sibling is taken for ragfunnel's only when it is a real folder,
never a link, that is empty or holds an index manifest or the mark a partial build starts with (removed
last when a folder is deleted); anything else is refused in one line and left untouched.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ragfunnel.errors import ConfigError, RunBusy, option
from ragfunnel.journal import exclusive

MANIFEST = "manifest.json"
PARTIAL_MARK = ".ragfunnel-partial"  # written first into DIR.partial: the folder is a build in progress
_MARKS = (MANIFEST, PARTIAL_MARK)


def index_folder(out: Path) -> Path:
    """The folder an index at ``out`` lives in: ``out``, or the folder a link at ``out`` points to."""
    try:
        folder = out.resolve() if out.is_symlink() else out
    except (OSError, RuntimeError):  # a loop of links (RuntimeError before Python 3.13)
        raise ConfigError(f"{out} is a link that leads back to itself; point it at a folder, or remove it") from None
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{out} is a file, but an index is a folder; pass a folder path ({option('out')})")
    return folder


def sibling(folder: Path, suffix: str) -> Path:
    return folder.with_name(folder.name + suffix)


@contextmanager
def writing(out: Path) -> Iterator[Path]:
    """Hold ``out``'s writer lock and yield the folder to write (see :func:`index_folder`), once what an
    earlier writer that was killed left beside it is put back or removed."""
    folder = index_folder(Path(out))
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create {folder.parent} ({e.strerror}); pass a writable {option('out')}") from None
    with exclusive(sibling(folder, ".lock"), folder):
        _recover(folder)
        yield folder


def _recover(folder: Path) -> None:
    previous, deleting, partial = (sibling(folder, s) for s in (".previous", ".previous.deleting", ".partial"))
    for leftover in (previous, deleting, partial):
        _check_ours(leftover)
    _remove(deleting)
    _remove(partial)
    if previous.exists():
        if folder.exists():  # killed after the new index went in: the old one is done with
            _delete(previous)
        else:  # killed between the two renames: the old index is the index
            previous.rename(folder)


def _check_ours(path: Path) -> None:
    """Refuse ``path`` unless it is absent or a folder a writer of ragfunnel's left (see the module)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        kind = "a link" if stat.S_ISLNK(info.st_mode) else "a file"
        raise ConfigError(f"{path} is {kind} that ragfunnel did not make, where it keeps an index's previous or "
                          "partial copy; move it away, then run again")
    names = set(os.listdir(path))
    if names and not any(name in names and (path / name).is_file() and not (path / name).is_symlink()
                         for name in _MARKS):
        raise ConfigError(f"{path} is a folder that ragfunnel did not make (it holds no index), where it keeps an "
                          "index's previous or partial copy; move it away, then run again")


def partial_directory(folder: Path) -> Path:
    """A fresh ``DIR.partial`` beside ``folder`` to build into, marked as a build in progress."""
    tmp = sibling(folder, ".partial")
    _remove(tmp)
    tmp.mkdir()
    (tmp / PARTIAL_MARK).write_bytes(b"")
    return tmp


def finish_index(tmp: Path, folder: Path, manifest_json: str) -> None:
    """Write the manifest into the finished ``tmp`` and swap it in for ``folder``.

    Until the first rename, ``folder`` is the old index, untouched; after it, the old index waits in
    ``DIR.previous`` (put back by the next writer, or by :func:`restore_previous`, if the process dies
    before the second) and is deleted once the new one is in place. A folder cannot be replaced by one
    atomic rename when the target is not empty, hence the two.
    """
    (tmp / MANIFEST).write_text(manifest_json)
    (tmp / PARTIAL_MARK).unlink()  # the manifest marks it as ragfunnel's from here on
    previous = sibling(folder, ".previous")
    if folder.exists():
        folder.rename(previous)
    tmp.rename(folder)
    _delete(previous)


def _delete(directory: Path) -> None:
    """Remove ``directory`` after renaming it away in one step, so a kill halfway through the removal never
    leaves a half-deleted ``DIR.previous`` that would be put back."""
    if directory.exists():
        doomed = sibling(directory, ".deleting")
        directory.rename(doomed)
        _remove(doomed)


def _remove(directory: Path) -> None:
    """Remove a folder of ragfunnel's (checked by :func:`_check_ours`), its marks last, so a kill part way leaves
    a folder still recognised as ours."""
    if not directory.exists():
        return
    for child in directory.iterdir():
        if child.name in _MARKS:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    for mark in _MARKS:
        (directory / mark).unlink(missing_ok=True)
    directory.rmdir()


def restore_previous(root: Path) -> None:
    """Put back the index a writer killed between the two renames of its swap left in ``DIR.previous``, so a
    reader finds it. Done only when no writer holds the lock (one that does is mid-swap, and finishes it)."""
    folder = index_folder(root)
    previous = sibling(folder, ".previous")
    if folder.exists() or not previous.is_dir():
        return
    try:
        with exclusive(sibling(folder, ".lock"), folder):
            _check_ours(previous)
            if previous.is_dir() and not folder.exists():
                previous.rename(folder)
    except (RunBusy, ConfigError, OSError):  # a writer at work, a sibling not ours, or a read-only place
        pass
