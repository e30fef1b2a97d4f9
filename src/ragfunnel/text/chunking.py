"""Fixed word windows over a context, keeping order and the exact original text. A word is a word unit of
:mod:`ragfunnel.text.scripts`: a whitespace-separated word, or one character of Chinese or Japanese."""

from __future__ import annotations

import bisect
import re

from ragfunnel.errors import ConfigError
from ragfunnel.text.scripts import WORD_UNIT
from ragfunnel.types import Chunk

# Between the files of one context (ragfunnel.documents). Python counts U+001C as whitespace, so it never
# enters a chunk's text; a window never runs past it, so no chunk holds the end of one file and the next's start.
FILE_SEPARATOR = "\x1c"
# Between the groups of rows a table is laid out in (ragfunnel.documents.sheets: a sheet's name and header, then
# rows, each group sized to fit one chunk of CHUNK_WORDS words). U+001E, the record separator, is whitespace to
# Python too, and a window never runs past it either, so no chunk holds the end of one group and the next's start.
GROUP_SEPARATOR = "\x1e"
_SEPARATOR = re.compile(f"[{FILE_SEPARATOR}{GROUP_SEPARATOR}]")


# Words per chunk, every method's default. Chunks of 100 words put the evidence within a 1,500-token budget
# more often than 150- or 300-word ones (more, smaller pieces from more places; benchmarks/evidence_recall.py).
CHUNK_WORDS = 100

def count_words(text: str) -> int:
    """Words (word units), counted as the chunker counts them (ASCII text's are its whitespace-separated words:
    counted so, five times faster)."""
    return len(text.split()) if text.isascii() else len(WORD_UNIT.findall(text))


def word_windows(text: str, words: int) -> list[tuple[int, int]]:
    """(start, end) character spans of consecutive ``words``-word windows of ``text``, none running past a
    :data:`FILE_SEPARATOR` or a :data:`GROUP_SEPARATOR` (a window ends at the last word before one, shorter)."""
    if words < 1:
        raise ConfigError(f"chunk_words must be at least 1, got {words}")
    spans = [m.span() for m in WORD_UNIT.finditer(text)]
    separators = [m.start() for m in _SEPARATOR.finditer(text)] \
        if FILE_SEPARATOR in text or GROUP_SEPARATOR in text else []
    windows, first = [], 0
    while first < len(spans):
        last = min(first + words, len(spans)) - 1
        if separators:  # stop at the last word before the next file or group of rows begins
            part = bisect.bisect_left(separators, spans[first][0])
            if part < len(separators):
                last = min(last, bisect.bisect_left(spans, (separators[part], 0)) - 1)
        windows.append((spans[first][0], spans[last][1]))
        first = last + 1
    return windows


def chunk_words(text: str, *, chunk_words: int = CHUNK_WORDS, doc_id: str = "context") -> list[Chunk]:
    """Split ``text`` into windows of ``chunk_words`` words (word units: a Chinese character is one).

    Each chunk's text is the exact slice of ``text`` from its first word to its last,
    so line breaks and spacing inside a chunk survive, and the chunks' words joined
    in ``position`` order are the context's words.
    """
    chunks = []
    for position, (start, end) in enumerate(word_windows(text, chunk_words)):
        piece = text[start:end]
        chunks.append(Chunk(id=f"{doc_id}#{position}", text=piece, doc_id=doc_id, position=position,
                            n_words=count_words(piece), start=start))
    return chunks
