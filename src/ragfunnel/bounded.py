"""Reading what others may have written, within bounds: a file that must be a regular file under a size
limit (never a FIFO that blocks or ``/dev/zero`` that never ends), and JSON whose nesting is limited before
the parser recurses into it (Python's parser raises RecursionError, or worse, on a few thousand brackets).

A refused file is an :class:`UnreadableFile` (an InputError) of one line, ``"{what} {path} is {problem};
{fix}"``: a file the user named gets the ``fix`` that suits it, and a cache that rebuilds itself words its own
warning around ``problem``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ragfunnel.errors import InputError

MAX_JSON_DEPTH = 64  # nothing ragfunnel reads or accepts nests deeper than a handful of levels
DAMAGED = "it is damaged or not a file ragfunnel wrote: remove it"
# A JSON string, escapes included (any byte may follow a backslash, so a stray one cannot end it early). One
# that never closes runs to the end: a match that can fail would be retried from every quote inside it, and
# a body of unclosed escaped quotes would take quadratic time.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEP = np.full(256, -1, dtype=np.int8)  # what each bracket does to the depth: +1 opening, -1 closing
_STEP[list(b"[{")] = 1


class UnreadableFile(InputError):
    """A file refused while reading or parsing it; ``problem`` says what is wrong in a few words
    (``"not JSON (Expecting value)"``), for a caller that words its own message."""

    def __init__(self, message: str, problem: str):
        super().__init__(message)
        self.problem = problem

    def __reduce__(self) -> tuple:
        """Rebuilt from both strings, so it survives the trip back from a Ray worker."""
        return (type(self), (str(self), self.problem))


class RefusedPath(UnreadableFile):
    """A path refused before anything is parsed: not a regular file (a FIFO would block the read, a device
    might never end it), over its size limit, or not openable. It names no file of the expected kind, so a
    caller that recovers from a damaged file may still treat this as the user's mistake."""


class TooDeep(ValueError):
    """JSON nested deeper than allowed; a ValueError, as :class:`json.JSONDecodeError` is."""


def json_depth_exceeds(raw: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``raw`` opens more than ``max_depth`` brackets at once (strings skipped), found without
    recursion and without parsing the rest.

    Text with few brackets is passed on two counts alone (most JSONL rows are). Past the point
    where a text stops being JSON the count may be off, but the parser stops there too.
    """
    opened = raw.count("[") + raw.count("{") if isinstance(raw, str) else raw.count(b"[") + raw.count(b"{")
    if opened <= max_depth:
        return False
    data = _as_utf8(raw)
    brackets = np.frombuffer(_STRING.sub(b"", data).translate(None, _NOT_BRACKETS), dtype=np.uint8)
    return bool((np.cumsum(_STEP[brackets], dtype=np.int64) > max_depth).any())


def _as_utf8(raw: str | bytes) -> bytes:
    """The bytes the scan runs over: ``json.loads`` also takes UTF-16 and UTF-32 bytes, whose quotes and
    backslashes a byte scan would misread, so bytes are decoded as the parser would and encoded again."""
    if isinstance(raw, str):
        return raw.encode("utf-8", "surrogatepass")
    encoding = json.detect_encoding(raw)
    return raw if encoding == "utf-8" else raw.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")


def loads(raw: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that refuses nesting past ``max_depth`` with :class:`TooDeep` before parsing."""
    if json_depth_exceeds(raw, max_depth):
        raise TooDeep(f"nested deeper than {max_depth} levels")
    return json.loads(raw)


def read_regular_file(path: str | Path, *, max_bytes: int, what: str, fix: str = DAMAGED) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes``.

    Opened without blocking (a FIFO's open waits for a writer) and checked on the open descriptor, so a
    file swapped in between the check and the read is still checked. Raises FileNotFoundError when the
    file is missing (callers often treat that as "not written yet") and :class:`RefusedPath` otherwise.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except NotADirectoryError as e:  # a file where a folder of the path should be: there is no such file
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path)) from e
    except OSError as e:
        problem = "a symlink loop" if e.errno == errno.ELOOP else f"unreadable ({e.strerror})"
        raise _refused(RefusedPath, what, path, problem, "check the path and its permissions") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(RefusedPath, what, path, "not a regular file (a folder, FIFO or device)", fix)
        if info.st_size > max_bytes:
            raise _refused(RefusedPath, what, path, f"{info.st_size:,} bytes, over the limit of {max_bytes:,}", fix)
        os.set_blocking(fd, True)
        file = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with file:
        data = _read_up_to(file, max_bytes + 1, expected=info.st_size)
    if len(data) > max_bytes:  # grew while being read
        raise _refused(RefusedPath, what, path, f"over the limit of {max_bytes:,} bytes", fix)
    return data


def _refused(kind: type[UnreadableFile], what: str, path: Path, problem: str, fix: str) -> UnreadableFile:
    return kind(f"{what} {path} is {problem}; {fix}", problem)


def _read_up_to(file: BinaryIO, limit: int, *, expected: int) -> bytes:
    """At most ``limit`` bytes: in one read when the file holds the ``expected`` size (a read of n bytes
    reserves n at once, so never ask for the limit itself), in pieces past it (a file that grew, or a
    kernel file that claims 0 bytes)."""
    data = file.read(min(expected, limit - 1) + 1)
    if len(data) <= expected:
        return data
    pieces, total = [data], len(data)
    while total < limit and (piece := file.read(min(limit - total, 1 << 20))):
        pieces.append(piece)
        total += len(piece)
    return b"".join(pieces)


def read_json_file(path: str | Path, *, max_bytes: int, what: str, max_depth: int = MAX_JSON_DEPTH,
                   fix: str = DAMAGED) -> Any:
    """A JSON file read with :func:`read_regular_file` and parsed with :func:`loads`. Raises
    FileNotFoundError when missing, :class:`UnreadableFile` for anything else wrong with it."""
    path = Path(path)
    data = read_regular_file(path, max_bytes=max_bytes, what=what, fix=fix)
    try:
        return loads(data.decode("utf-8"), max_depth=max_depth)
    except ValueError as e:
        raise _refused(UnreadableFile, what, path, _json_problem(e), fix) from None


def _json_problem(error: ValueError) -> str:
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON ({error.msg})"
    return str(error) if isinstance(error, TooDeep) else f"not usable JSON ({error})"  # a number too long
