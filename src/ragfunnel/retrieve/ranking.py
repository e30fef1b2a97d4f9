"""Scoring a context's chunks against a question: the ranking every method that ranks a context's chunks shares.

:func:`question_scores` (OP-RAG, vanilla, self-route, FB-RAG's Stage I and backward scores) is BM25,
max-normalised, plus the bundled MiniLM's cosine between the question and each chunk, rescaled to [0, 1]
over the chunks. On 308 long multi-hop and LongBench questions (``benchmarks/evidence_recall.py``, where the
alternatives it was chosen over live: MiniLM alone, reciprocal-rank fusion, neighbour expansion, pseudo-relevance
feedback) it put the evidence within a 1,500-token budget more often than BM25 alone. Without the ``embed``
extra it is BM25 alone, with one warning.

What no question changes is kept per document (:mod:`ragfunnel.retrieve.document_cache`): the chunks' BM25 term
ids, and MiniLM's vectors of the pieces embedded so far, so a later question, in this process or another, embeds
only pieces no earlier one needed.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version

import numpy as np

from ragfunnel.errors import MissingExtra, ModelError
from ragfunnel.retrieve.document_cache import chunk_bm25, kept_vectors, piece_key
from ragfunnel.retrieve.fusion import max_normalize
from ragfunnel.text import chunk_words
from ragfunnel.types import Chunk

log = logging.getLogger(__name__)

DENSE_WINDOW = 100  # words per piece a chunk is embedded in: MiniLM reads at most 256 tokens
# Beyond this many chunks (about 19,000 words at 100 a chunk) only BM25's best are embedded: MiniLM reads some
# 4,000 tokens a second on two cores, a second per 30 chunks. Over 152 English questions in 30,000-word contexts
# (benchmarks/dense_candidates.py) BM25's best 48 held every chunk the ranking kept the evidence with, but on the
# shared German PDF an English question's evidence ranked past BM25's 64th chunk (benchmarks/RESULTS.md): a
# question in other words than its document's needs MiniLM to look further.
DENSE_MAX_CHUNKS = 192
CACHED_PIECES = 16_384  # piece vectors kept per process (6 MB): a second question embeds nothing again


def bm25_scores(question: str, chunks: list[Chunk]) -> np.ndarray:
    return chunk_bm25(chunks).score([question])[0]


@lru_cache(maxsize=1)
def embedder_identity() -> str:
    """What decides the bundled MiniLM's vectors: its pinned ONNX file and the libraries that run it. Known without
    loading the model, so kept vectors are found before it loads (and it need not load at all)."""
    from ragfunnel.retrieve.embed import MiniLMEmbedder

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "absent"

    return f"{MiniLMEmbedder.spec} {MiniLMEmbedder.identity}, onnxruntime {installed('onnxruntime')}, " \
           f"tokenizers {installed('tokenizers')}"


def embedder_width() -> int:
    """The length of the bundled MiniLM's vectors."""
    from ragfunnel.retrieve.embed import MiniLMEmbedder

    return MiniLMEmbedder.dim


class PieceVectors:
    """MiniLM vectors of text pieces, the recently used ones kept by the text's hash."""

    def __init__(self, capacity: int = CACHED_PIECES):
        self._kept: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def encode(self, texts: list[str], *, known: dict[bytes, np.ndarray] | None = None) -> np.ndarray:
        """The vectors of ``texts``; ``known``: vectors kept elsewhere (by :func:`piece_key`), not embedded again."""
        from ragfunnel.retrieve.embed import bundled_embedder

        keys = [piece_key(t) for t in texts]
        with self._lock:
            for k, v in (known or {}).items():
                self._kept.setdefault(k, np.array(v))  # a row of its own: a view would keep its whole array
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
    kept = kept_vectors(chunks, embedder_identity(), width=embedder_width())
    keys = [piece_key(p) for p in pieces]
    known = kept.get(keys) if kept is not None else {}
    vectors = PIECES.encode([question, *pieces], known=known)
    if kept is not None:
        kept.add({k: v for k, v in zip(keys, vectors[1:], strict=True) if k not in known})
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
