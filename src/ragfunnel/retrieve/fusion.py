"""Combining and ranking chunk scores."""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from ragfunnel.errors import ConfigError


def max_normalize(scores: np.ndarray) -> np.ndarray:
    """Scale each row of non-negative scores so its maximum is 1 (all-zero rows stay zero).

    BM25 scores grow with query length, so a one-line question and a three-sentence
    draft score on different scales; dividing by the row maximum puts each query's
    evidence on [0, 1] before queries are compared or mixed.
    """
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    peak = scores.max(axis=1, keepdims=True)
    return np.divide(scores, peak, out=np.zeros_like(scores), where=peak > 0)


Fusion = Literal["normalized", "raw"]
FUSIONS: tuple[str, ...] = get_args(Fusion)


def check_fusion(fusion: str) -> str:
    if fusion not in FUSIONS:
        raise ConfigError(f"unknown fusion {fusion!r}; valid: {', '.join(FUSIONS)}")
    return fusion


def forward_backward_scores(
    backward: np.ndarray, forward: np.ndarray, *, eta_backward: float, eta_forward: float,
    fusion: str = "normalized",
) -> np.ndarray:
    """FB-RAG's chunk score: η_B·S(c; q) + η_F·max_k S(c; r_k + a_k).

    ``backward`` has shape (n_chunks,), ``forward`` (n_samples, n_chunks). Taking the maximum over
    samples keeps a chunk high if any single draft leaned on it. ``fusion="raw"`` is the paper's
    Eq. 5 on the scores as they are; ``"normalized"`` first divides each query's scores by their
    maximum (question and every draft alike), so a long draft's larger BM25 scale neither drowns
    the question nor the other drafts.
    """
    scale = max_normalize if check_fusion(fusion) == "normalized" else np.atleast_2d
    back = scale(np.asarray(backward, dtype=np.float64))[0]
    fwd = scale(np.asarray(forward, dtype=np.float64)).max(axis=0) if len(forward) else np.zeros_like(back)
    return eta_backward * back + eta_forward * fwd


def rank(scores: np.ndarray, *, tiebreak: np.ndarray | None = None) -> np.ndarray:
    """Indices by descending score; ties by descending ``tiebreak``, then by position."""
    scores = np.asarray(scores, dtype=np.float64)
    keys = [np.arange(len(scores))]
    if tiebreak is not None:
        keys.append(-np.asarray(tiebreak, dtype=np.float64))
    keys.append(-scores)
    return np.lexsort(keys)


def best_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices, scores) of the ``k`` highest scores, best first, ties by index; without a full sort."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=scores.dtype)
    best = np.argpartition(-scores, k - 1)[:k]
    best = best[np.lexsort((best, -scores[best]))]
    return best, scores[best]
