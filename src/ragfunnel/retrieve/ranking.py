"""Scoring a context's chunks against a question: the ranking every method that ranks a context's chunks shares.

:func:`question_scores` (OP-RAG, vanilla, self-route, FB-RAG's Stage I and backward scores) is BM25,
max-normalised, plus the bundled MiniLM's cosine between the question and each chunk, rescaled to [0, 1]
over the chunks. On 308 long multi-hop and LongBench questions (``benchmarks/evidence_recall.py``, where the
alternatives it was chosen over live: MiniLM alone, reciprocal-rank fusion, neighbour expansion, pseudo-relevance
feedback) it put the evidence within a 1,500-token budget more often than BM25 alone. Without the ``embed``
extra it is BM25 alone, with one warning.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict

import numpy as np

from ragfunnel.errors import MissingExtra, ModelError
from ragfunnel.retrieve.bm25 import BM25Index
from ragfunnel.retrieve.fusion import max_normalize
from ragfunnel.text import chunk_words
from ragfunnel.types import Chunk

log = logging.getLogger(__name__)

DENSE_WINDOW = 100  # words per piece a chunk is embedded in: MiniLM reads at most 256 tokens
# Beyond this many chunks (about 19,000 words at 100 a chunk) only BM25's best are embedded: MiniLM reads
# some 4,000 tokens a second on two cores, and a book would cost a minute before the answer starts.
DENSE_MAX_CHUNKS = 192
CACHED_PIECES = 16_384  # piece vectors kept per process (6 MB): a second question embeds nothing again


def bm25_scores(question: str, chunks: list[Chunk]) -> np.ndarray:
    return BM25Index([c.text for c in chunks]).score([question])[0]


class PieceVectors:
    """MiniLM vectors of text pieces, the recently used ones kept by the text's hash."""

    def __init__(self, capacity: int = CACHED_PIECES):
        self._kept: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def encode(self, texts: list[str]) -> np.ndarray:
        from ragfunnel.retrieve.embed import bundled_embedder

        keys = [hashlib.sha1(t.encode("utf-8", "surrogatepass")).digest() for t in texts]
        with self._lock:
            missing = {k: i for i, k in enumerate(keys) if k not in self._kept}  # each new text once
        if missing:
            fresh = bundled_embedder().encode([texts[i] for i in missing.values()])
            with self._lock:
                self._kept.update(zip(missing, fresh, strict=True))
        with self._lock:
            out = np.stack([self._kept[k] for k in keys]) if keys else np.zeros((0, 384), dtype=np.float32)
            for k in keys:
                self._kept.move_to_end(k)
            while len(self._kept) > self._capacity:
                self._kept.popitem(last=False)
        return out


PIECES = PieceVectors()


def dense_scores(question: str, chunks: list[Chunk], *, only: np.ndarray | None = None) -> np.ndarray:
    """Each chunk's best cosine to the question over its ~100-word pieces (bundled MiniLM); with ``only``
    (chunk indices), the other chunks score the lowest cosine found."""
    chosen = range(len(chunks)) if only is None else only
    pieces, owner = [], []
    for i in chosen:
        for piece in chunk_words(chunks[i].text, chunk_words=DENSE_WINDOW):
            pieces.append(piece.text)
            owner.append(i)
    vectors = PIECES.encode([question, *pieces])
    cosine = (vectors[1:] @ vectors[0]).astype(np.float64)
    best = np.full(len(chunks), -np.inf)
    np.maximum.at(best, np.asarray(owner, dtype=np.int64), cosine)
    return np.where(np.isfinite(best), best, cosine.min() if len(cosine) else 0.0)


def unit_range(scores: np.ndarray) -> np.ndarray:
    """Scores rescaled to [0, 1] (all equal: all 0)."""
    low, high = float(scores.min()), float(scores.max())
    return (scores - low) / (high - low) if high > low else np.zeros_like(scores)


def hybrid(bm25: np.ndarray, dense: np.ndarray) -> np.ndarray:
    """BM25 max-normalised plus the cosine rescaled to [0, 1]: each counts up to 1."""
    return max_normalize(np.asarray(bm25, dtype=np.float64))[0] + unit_range(np.asarray(dense, dtype=np.float64))


_fallback_reported = False


def question_scores(question: str, chunks: list[Chunk]) -> np.ndarray:
    """The shared ranking's score of every chunk for ``question`` (see the module), over BM25's best
    :data:`DENSE_MAX_CHUNKS` chunks when there are more; BM25 alone when MiniLM cannot load."""
    global _fallback_reported
    bm25 = bm25_scores(question, chunks)
    if len(chunks) < 2:
        return bm25
    only = None if len(chunks) <= DENSE_MAX_CHUNKS else np.argsort(-bm25, kind="stable")[:DENSE_MAX_CHUNKS]
    try:
        dense = dense_scores(question, chunks, only=only)
    except (MissingExtra, ModelError) as e:
        if not _fallback_reported:
            _fallback_reported = True
            log.warning("chunks are ranked by BM25 alone: %s", e)
        return bm25
    return hybrid(bm25, dense)
