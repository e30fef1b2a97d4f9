"""Reading and checking a provided long context."""

from __future__ import annotations

import sys
from pathlib import Path

from ragfunnel.errors import InputError
from ragfunnel.text.hygiene import clean_text

# Share of control characters above which text is treated as binary, not prose.
_MAX_CONTROL_SHARE = 0.01


def check_context(text: str, *, source: str = "context") -> str:
    """Return ``text`` if it is usable prose (lone surrogates replaced); raise :class:`InputError` otherwise."""
    text = clean_text(text, source=source)
    if not text.strip():
        raise InputError(f"{source} is empty or whitespace only; pass a file with the text to answer from")
    control = sum(1 for ch in text if ord(ch) < 32 and ch not in "\n\r\t\f\v")
    if "\x00" in text or control > _MAX_CONTROL_SHARE * len(text):
        raise InputError(f"{source} looks binary, not text; convert it to plain UTF-8 text first (e.g. pdftotext)")
    return text


def read_context(path: str | Path) -> str:
    """Read a UTF-8 context file (``-`` reads stdin) and check it."""
    source = "stdin" if str(path) == "-" else str(path)
    try:
        raw = sys.stdin.buffer.read() if source == "stdin" else Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"context file {source} does not exist; check the path") from None
    except IsADirectoryError:
        raise InputError(f"context path {source} is a directory; pass one text file") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(
            f"{source} is not UTF-8 text (bad byte at offset {e.start}); "
            "convert it to UTF-8 plain text first (e.g. iconv, pdftotext)"
        ) from None
    return check_context(text, source=source)
