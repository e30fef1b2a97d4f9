"""Files replaced whole or not at all: written under a unique name beside the target, then renamed over it.

A reader, or a process killed mid-write, never sees half a file: the rename is atomic on one file system, so
the target holds the old bytes or the new ones. On an error the temporary file is removed; only a kill can
leave one behind, named ``{target}.{pid}.{random}.partial`` so it is recognisable and never matched by a
pattern such as ``*.json`` that looks for the real files.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

SUFFIX = ".partial"


def _create_beside(path: Path) -> tuple[int, Path]:
    """A new file in ``path``'s folder, under a name no other process or thread is writing. Created with
    mode 0666 less the umask, as ``open`` would, so the target keeps the permissions a plain write gives it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}{SUFFIX}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # left by a killed writer whose pid was reused: draw another name
            continue


@contextmanager
def atomic_open(path: str | Path, mode: str = "wb", *, encoding: str | None = None,
                fsync: bool = False) -> Iterator[IO[Any]]:
    """A file to write ``path``'s new content into, a piece at a time; it replaces ``path`` when the block
    ends without an error, and is removed otherwise. ``mode`` is ``"w"`` (text) or ``"wb"``; ``fsync``
    flushes the bytes to the disk before the rename, so a power cut cannot leave an empty file either."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes a whole new file: mode 'w' or 'wb', not {mode!r}")
    path = Path(path)
    fd, tmp = _create_beside(path)
    try:
        with os.fdopen(fd, mode, encoding=encoding if mode == "w" else None) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | Path, data: str | bytes, *, encoding: str = "utf-8", fsync: bool = False) -> None:
    """Replace ``path`` with ``data`` (text in ``encoding``, or bytes) whole, or leave it as it was."""
    if isinstance(data, str):
        with atomic_open(path, "w", encoding=encoding, fsync=fsync) as f:
            f.write(data)
    else:
        with atomic_open(path, "wb", fsync=fsync) as f:
            f.write(data)
