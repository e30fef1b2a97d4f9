"""Checking a provided long context (files are read by ragfunnel.documents)."""

from __future__ import annotations

import re

from ragfunnel.errors import InputError
from ragfunnel.text.hygiene import clean_text

# Share of control characters above which text is treated as binary, not prose.
_MAX_CONTROL_SHARE = 0.01
# The C0 controls that prose does not hold (tab, newlines, vertical tab and form feed it does).
# Control characters binary files hold; U+001C and U+001E are ragfunnel's own file and row-group separators.
_CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x1d\x1f]")


def check_context(text: str, *, source: str = "context") -> str:
    """Return ``text`` if it is usable prose (lone surrogates replaced); raise :class:`InputError` otherwise."""
    text = clean_text(text, source=source)
    if not text.strip():
        raise InputError(f"{source} is empty or whitespace only; pass a file with the text to answer from")
    if "\x00" in text or len(_CONTROL.findall(text)) > _MAX_CONTROL_SHARE * len(text):
        raise InputError(f"{source} looks binary, not text; pass a file of a format ragfunnel reads (`ragfunnel "
                         "read --help` lists them) or UTF-8 text")
    return text
