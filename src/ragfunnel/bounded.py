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
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ragfunnel.errors import InputError

MAX_JSON_DEPTH = 64  # nothing ragfunnel reads or accepts nests deeper than a handful of levels
DAMAGED = "it is damaged or not a file ragfunnel wrote: remove it"
# A JSON string, escapes included (any byte may follow a backslash, so a stray one cannot end it early). One
# that never closes runs to the end: a match that can fail would be retried from every quote inside it, and
# a body of unclosed escaped quotes would take quadratic time. Runs of plain characters are taken whole, not
# one alternation a character.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
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


class CannotOpen(RefusedPath):
    """A path that names something the process may not open or read now (permissions, an I/O error): the
    file may be fine, so a cache that recovers from damaged files leaves it alone."""


class TooDeep(ValueError):
    """JSON nested deeper than allowed; a ValueError, as :class:`json.JSONDecodeError` is."""


class TooManyDigits(ValueError):
    """JSON holding an integer of more digits than Python converts (``sys.get_int_max_str_digits()``, 4,300
    unless changed); the message names its field when it is one of a top-level object's."""


class _Digits(str):
    """An integer's digits, kept as text to find the field that holds too many of them."""


def json_depth_exceeds(raw: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``raw`` opens more than ``max_depth`` brackets at once (strings skipped), found without
    recursion and without parsing the rest.

    Text with few brackets is passed on two counts alone (most JSONL rows are), and text whose brackets
    are mostly inside strings on a count once the strings are removed. Past the point where a text stops
    being JSON the count may be off, but the parser stops there too.
    """
    opened = raw.count("[") + raw.count("{") if isinstance(raw, str) else raw.count(b"[") + raw.count(b"{")
    if opened <= max_depth:
        return False
    outside_strings = _without_strings(_as_utf8(raw)).translate(None, _NOT_BRACKETS)
    if outside_strings.count(b"[") + outside_strings.count(b"{") <= max_depth:
        return False
    brackets = np.frombuffer(outside_strings, dtype=np.uint8)
    return bool((np.cumsum(_STEP[brackets], dtype=np.int64) > max_depth).any())


def _without_strings(data: bytes) -> bytes:
    """``data`` with its JSON strings removed. With no escaped quote or backslash in it, every quote opens or
    closes a string, and splitting on them is many times faster than the pattern (a corpus row of text)."""
    if b'\\"' not in data and b"\\\\" not in data:
        return b"".join(data.split(b'"')[::2])
    return _STRING.sub(b"", data)


def _as_utf8(raw: str | bytes) -> bytes:
    """The bytes the scan runs over: ``json.loads`` also takes UTF-16 and UTF-32 bytes, whose quotes and
    backslashes a byte scan would misread, so bytes are decoded as the parser would and encoded again."""
    if isinstance(raw, str):
        return raw.encode("utf-8", "surrogatepass")
    encoding = json.detect_encoding(raw)
    return raw if encoding == "utf-8" else raw.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")


def loads(raw: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that refuses nesting past ``max_depth`` with :class:`TooDeep` before parsing, and an
    integer too long for Python with :class:`TooManyDigits` (its own words tell a user to change Python)."""
    if json_depth_exceeds(raw, max_depth):
        raise TooDeep(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(raw)
    except ValueError as e:
        if type(e) is not ValueError:  # JSONDecodeError, UnicodeDecodeError: said well enough already
            raise
        raise TooManyDigits(_too_many_digits(raw)) from None


def _too_many_digits(raw: str | bytes) -> str:
    limit = sys.get_int_max_str_digits()
    try:
        data = json.loads(raw, parse_int=_Digits)
    except ValueError:  # broken further on, past where the first parse stopped
        data = None
    fields = data.items() if isinstance(data, dict) else ()
    field = next((key for key, value in fields if isinstance(value, _Digits) and len(value.lstrip("-")) > limit), None)
    return f"{'a number' if field is None else repr(field)} has over {limit:,} digits"


def open_regular_file(path: str | Path, *, what: str, fix: str = DAMAGED, max_bytes: int | None = None,
                      follow_symlinks: bool = True) -> BinaryIO:
    """``path`` open for reading in binary, refused unless it is a regular file (of at most ``max_bytes``
    when given): for a file read as a stream, too long to read whole. ``follow_symlinks=False`` refuses a
    symbolic link too (a file a program wrote itself is never one).

    Opened without blocking (a FIFO's open waits for a writer) and checked on the open descriptor, so a
    file swapped in between the check and the read is still checked. Raises FileNotFoundError when the
    file is missing (callers often treat that as "not written yet"), :class:`CannotOpen` when it cannot be
    opened now, and :class:`RefusedPath` otherwise.
    """
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except NotADirectoryError as e:  # a file where a folder of the path should be: there is no such file
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path)) from e
    except ValueError:  # a NUL byte, which no file name holds; repr keeps it off the terminal
        raise RefusedPath(f"{what} {str(path)!r} holds a NUL character, which no file name can; check the path",
                          "a path holding a NUL character") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            problem = "a symlink loop" if follow_symlinks else "a symbolic link"
            raise _refused(RefusedPath, what, path, problem, fix if not follow_symlinks else
                           "check the path and its permissions") from None
        raise _refused(CannotOpen, what, path, f"unreadable ({e.strerror})",
                       "check the path and its permissions") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(RefusedPath, what, path, "not a regular file (a folder, FIFO or device)", fix)
        if max_bytes is not None and info.st_size > max_bytes:
            raise _refused(RefusedPath, what, path, f"{info.st_size:,} bytes, over the limit of {max_bytes:,}", fix)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: str | Path, *, max_bytes: int, what: str, fix: str = DAMAGED,
                      follow_symlinks: bool = True) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes``, opened and checked by
    :func:`open_regular_file` (FileNotFoundError when missing, :class:`RefusedPath` otherwise; an OSError
    when the read itself fails)."""
    path = Path(path)
    with open_regular_file(path, what=what, fix=fix, max_bytes=max_bytes, follow_symlinks=follow_symlinks) as file:
        data = _read_up_to(file, max_bytes + 1, expected=os.fstat(file.fileno()).st_size)
    if len(data) > max_bytes:  # grew while being read
        raise _refused(RefusedPath, what, path, f"over the limit of {max_bytes:,} bytes", fix)
    return data


def numbered_lines(file: BinaryIO, path: str | Path, *, max_line_bytes: int, what: str,
                   fix: str) -> Iterator[tuple[int, bytes]]:
    """(number from 1, bytes) of each line of ``file`` (opened from ``path``), none held past
    ``max_line_bytes``: a longer one (a sparse file's run of NULs holds no newline) is an
    :class:`UnreadableFile` naming the file, the line and the limit, read no further than the limit."""
    number = 0
    while line := file.readline(max_line_bytes + 1):
        number += 1
        if len(line) > max_line_bytes and not line.endswith(b"\n"):
            raise _refused(UnreadableFile, what, Path(path), f"over {max_line_bytes:,} bytes on line {number}", fix)
        yield number, line


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
                   fix: str = DAMAGED, follow_symlinks: bool = True) -> Any:
    """A JSON file read with :func:`read_regular_file` and parsed with :func:`loads`. Raises
    FileNotFoundError when missing, :class:`UnreadableFile` for anything else wrong with it."""
    path = Path(path)
    data = read_regular_file(path, max_bytes=max_bytes, what=what, fix=fix, follow_symlinks=follow_symlinks)
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
