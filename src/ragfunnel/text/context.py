"""Checking a provided long context (files are read by ragfunnel.documents)."""

from __future__ import annotations

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
        raise InputError(f"{source} looks binary, not text; pass a PDF, DOCX, EPUB, HTML, Markdown or UTF-8 text file")
    return text
