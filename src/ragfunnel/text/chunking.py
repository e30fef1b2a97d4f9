"""Fixed word windows over a context, keeping order and the exact original text."""

from __future__ import annotations

import re

from ragfunnel.errors import ConfigError
from ragfunnel.types import Chunk

_WORD = re.compile(r"\S+")


def chunk_words(text: str, *, chunk_words: int = 300, doc_id: str = "context") -> list[Chunk]:
    """Split ``text`` into windows of ``chunk_words`` whitespace-separated words.

    Each chunk's text is the exact slice of ``text`` from its first word to its last,
    so line breaks and spacing inside a chunk survive, and the chunks' words joined
    in ``position`` order are the context's words.
    """
    if chunk_words < 1:
        raise ConfigError(f"chunk_words must be at least 1, got {chunk_words}")
    spans = [m.span() for m in _WORD.finditer(text)]
    chunks = []
    for position, first in enumerate(range(0, len(spans), chunk_words)):
        window = spans[first : first + chunk_words]
        chunks.append(
            Chunk(
                id=f"{doc_id}#{position}",
                text=text[window[0][0] : window[-1][1]],
                doc_id=doc_id,
                position=position,
                n_words=len(window),
            )
        )
    return chunks
