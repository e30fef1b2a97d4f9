"""Scoring a context's chunks against a question: BM25, the bundled MiniLM, and their fusions.

:func:`question_scores` is the ranking every method that ranks a context's chunks shares (OP-RAG, vanilla,
self-route, FB-RAG's Stage I and backward scores): BM25 max-normalised plus MiniLM's cosine rescaled to
[0, 1]. On 309 long multi-hop and LongBench questions (benchmarks/evidence_recall.py) it put the evidence
within a 1,500-token budget more often than BM25 alone; the other rankings here are what it was measured
against. Without the ``embed`` extra it is BM25 alone, with one warning.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections import Counter, OrderedDict

import numpy as np

from ragfunnel.errors import ConfigError, MissingExtra, ModelError
from ragfunnel.retrieve.bm25 import BM25Index, tokenize
from ragfunnel.retrieve.fusion import max_normalize
from ragfunnel.text import chunk_words
from ragfunnel.types import Chunk

log = logging.getLogger(__name__)

RANKINGS = ("bm25", "dense", "rrf", "hybrid", "bm25+nb", "rrf+nb", "hybrid+nb", "bm25+prf", "rrf+prf", "hybrid+prf")
RRF_K = 60  # reciprocal-rank fusion's constant (Cormack et al., 2009)
DENSE_WINDOW = 100  # words per piece a chunk is embedded in: MiniLM reads at most 256 tokens
# Beyond this many chunks (about 19,000 words at 100 a chunk) only BM25's best are embedded: MiniLM reads
# some 4,000 tokens a second on two cores, and a book would cost a minute before the answer starts.
DENSE_MAX_CHUNKS = 192
CACHED_PIECES = 16_384  # piece vectors kept per process (6 MB): a second question embeds nothing again
NEIGHBOUR_SHARE = 0.5
# Feedback: the terms that mark the best chunks and occur in a few others (a bridge entity a second hop is
# about) are searched for again, and their scores added at this weight.
FEEDBACK_CHUNKS, FEEDBACK_TERMS, FEEDBACK_WEIGHT = 2, 8, 0.5
FEEDBACK_MAX_SHARE = 0.1  # a term in more than this share of the chunks links nothing in particular


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
            missing = sorted({i for i, k in enumerate(keys) if k not in self._kept}, key=lambda i: keys[i])
        if missing:
            fresh = bundled_embedder().encode([texts[i] for i in missing])
            with self._lock:
                for i, vector in zip(missing, fresh, strict=True):
                    self._kept[keys[i]] = vector
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


def reciprocal_rank(*scores: np.ndarray, k: int = RRF_K) -> np.ndarray:
    """Σ 1 / (k + rank) over the rankings (rank 1 = best; ties share the better rank)."""
    total = np.zeros(len(scores[0]))
    for s in scores:
        order = np.argsort(-s, kind="stable")
        ranks = np.empty(len(s))
        ranks[order] = np.arange(1, len(s) + 1)
        total += 1.0 / (k + ranks)
    return total


def unit_range(scores: np.ndarray) -> np.ndarray:
    """Scores rescaled to [0, 1] (all equal: all 0)."""
    low, high = float(scores.min()), float(scores.max())
    return (scores - low) / (high - low) if high > low else np.zeros_like(scores)


def with_neighbours(scores: np.ndarray, share: float = NEIGHBOUR_SHARE) -> np.ndarray:
    """Each chunk at least ``share`` of its better neighbour's score: the passage a bridge fact spills into."""
    padded = np.pad(scores, 1)
    return np.maximum(scores, share * np.maximum(padded[:-2], padded[2:]))


def feedback_terms(question: str, chunks: list[Chunk], first: np.ndarray) -> list[str]:
    """The terms of the :data:`FEEDBACK_CHUNKS` best chunks under ``first`` that the question lacks and that
    occur in some other chunk, but in few: weighted by their count in the best chunks times their idf."""
    terms = tokenize([c.text for c in chunks])
    asked = set(tokenize([question])[0])
    df = Counter(t for ts in terms for t in set(ts))
    most = max(2, int(FEEDBACK_MAX_SHARE * len(chunks)))
    weight: Counter[str] = Counter()
    for i in np.argsort(-np.asarray(first), kind="stable")[:FEEDBACK_CHUNKS]:
        for t, tf in Counter(terms[i]).items():
            if t not in asked and 2 <= df[t] <= most:
                weight[t] += tf * math.log(len(chunks) / df[t])
    return [t for t, _ in weight.most_common(FEEDBACK_TERMS)]


def with_feedback(question: str, chunks: list[Chunk], first: np.ndarray) -> np.ndarray:
    """``first`` (max-normalised) plus :data:`FEEDBACK_WEIGHT` times the BM25 of its feedback terms."""
    terms = feedback_terms(question, chunks, first)
    base = max_normalize(np.maximum(first, 0.0))[0]
    if not terms:
        return base
    return base + FEEDBACK_WEIGHT * max_normalize(bm25_scores(" ".join(terms), chunks))[0]


def fuse(ranking: str, bm25: np.ndarray, dense: np.ndarray | None = None, *, question: str = "",
         chunks: list[Chunk] | None = None) -> np.ndarray:
    """The scores ``ranking`` gives from each chunk's BM25 and dense scores (``dense`` unused by ``bm25``;
    ``question`` and ``chunks`` used by feedback only)."""
    if ranking not in RANKINGS:
        raise ConfigError(f"unknown ranking {ranking!r}; valid: {', '.join(RANKINGS)}")
    base, _, expand = ranking.partition("+")
    if base == "bm25":
        scores = np.asarray(bm25, dtype=np.float64)
    elif base == "dense":
        scores = dense
    elif base == "rrf":
        scores = reciprocal_rank(bm25, dense)
    else:
        scores = max_normalize(bm25)[0] + unit_range(dense)
    if expand == "prf":
        return with_feedback(question, chunks or [], scores)
    return with_neighbours(scores) if expand == "nb" else scores


def needs_dense(ranking: str) -> bool:
    return not ranking.startswith("bm25")


def chunk_scores(ranking: str, question: str, chunks: list[Chunk]) -> np.ndarray:
    """Every chunk's score under ``ranking`` (one of :data:`RANKINGS`), higher is better."""
    dense = dense_scores(question, chunks) if needs_dense(ranking) else None
    return fuse(ranking, bm25_scores(question, chunks), dense, question=question, chunks=chunks)


_fallback_reported = False


def question_scores(question: str, chunks: list[Chunk]) -> np.ndarray:
    """The shared ranking's score of every chunk for ``question``: ``hybrid`` (see the module), over BM25's
    best :data:`DENSE_MAX_CHUNKS` chunks when there are more; BM25 alone when MiniLM cannot load."""
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
    return fuse("hybrid", bm25, dense)
