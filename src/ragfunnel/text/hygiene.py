"""Text that Python holds but cannot write: lone surrogates.

JSON's ``"\\ud800"`` escape and undecodable command-line bytes give Python strings holding half of a
UTF-16 pair. Such a string cannot be encoded as UTF-8, so it breaks hashing, caches, journals and
responses far from where it came in. Every entry point (the service's requests, ``ask``'s question,
dataset rows, corpus files) replaces them with U+FFFD, the replacement character, and says so once.
"""

from __future__ import annotations

import logging
import re
from typing import Any

log = logging.getLogger(__name__)

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def replace_lone_surrogates(value: Any) -> tuple[Any, int]:
    """``value`` (a string, or lists and dicts of them) with every lone surrogate replaced, and how many were."""
    if isinstance(value, str):
        return _LONE_SURROGATE.subn(REPLACEMENT, value)
    if isinstance(value, list):
        pairs = [replace_lone_surrogates(v) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    if isinstance(value, dict):
        pairs = {replace_lone_surrogates(k)[0]: replace_lone_surrogates(v) for k, v in value.items()}
        return {k: v for k, (v, _) in pairs.items()}, sum(n for _, n in pairs.values())
    return value, 0


def clean_text(text: str, *, source: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD, with one warning naming ``source`` if there were any."""
    cleaned, count = replace_lone_surrogates(text)
    warn_replaced(source, count)
    return cleaned


class RecordCleaner:
    """Cleans the records of one file as they are read, and warns once, naming the first place, at :meth:`done`."""

    def __init__(self, path: object):
        self.path, self.count, self.first = path, 0, None

    def clean(self, record: Any, line: int) -> Any:
        cleaned, count = replace_lone_surrogates(record)
        if count and self.first is None:
            self.first = line
        self.count += count
        return cleaned

    def done(self) -> None:
        warn_replaced(f"{self.path}:{self.first} (and later rows)" if self.first else str(self.path), self.count)


def warn_replaced(source: str, count: int) -> None:
    if count:
        log.warning("%s held %d lone surrogate(s) (half of a UTF-16 pair, not text); replaced with U+FFFD",
                    source, count)


def browser_safe(text: str) -> str:
    """``text`` as it may go to a browser: U+2028/U+2029 escaped, and any lone surrogate that slipped past the
    entry checks (in a message quoting input) replaced, so encoding it can never fail."""
    return replace_lone_surrogates(text)[0].replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
