"""How well a confidence tells right answers from wrong ones: pure functions over plain numbers.

``is_right`` turns a row's metrics into the verdict a confidence predicts; ``auroc`` measures how
well confidences rank right answers above wrong ones, ``expected_calibration_error`` and
``reliability_bins`` how close they are to the share actually right, and ``coverage_curve`` what
answering only the most confident questions buys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ragfunnel.errors import InputError

# The metric that decides right from wrong, in order of preference: token F1 for short answers,
# LongBench's own score, choice accuracy. ROUGE-L (summaries) has no right or wrong.
VERDICT_METRICS = ("f1", "longbench", "accuracy")
RIGHT_AT = 0.5


def is_right(metrics: Mapping[str, float]) -> bool | None:
    """Whether a row's answer counts as right; None when its metrics cannot say (summaries, failed rows)."""
    for name in VERDICT_METRICS:
        if name in metrics:
            return metrics[name] >= RIGHT_AT
    return None


def _scores(values: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be numbers; one is not (a damaged row?)") from None
    if array.ndim != 1 or array.size == 0:
        raise InputError(f"{what} must be a non-empty list of numbers, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise InputError(f"{what} holds a value that is not a finite number (NaN or infinite); drop those rows")
    return array


def _paired(values: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray,
            what: str) -> tuple[np.ndarray, np.ndarray]:
    array = _scores(values, what)
    truth = np.asarray(labels)
    if truth.shape != array.shape:
        raise InputError(f"{what} and labels differ in length ({array.size} and {truth.size}); pass one label "
                         "per value")
    if not np.isin(truth, (0, 1)).all():
        raise InputError("labels must be True/False (or 1/0)")
    return array, truth.astype(bool)


def _probabilities(probs: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray,
                   bins: int) -> tuple[np.ndarray, np.ndarray]:
    if bins < 1:
        raise InputError(f"bins must be at least 1, got {bins}")
    array, truth = _paired(probs, labels, "probabilities")
    if ((array < 0) | (array > 1)).any():
        raise InputError(f"probabilities must lie in [0, 1]; got {array.min():g} to {array.max():g}")
    return array, truth


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``values``, tied values sharing the mean of the ranks they span."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts_run = np.r_[True, ordered[1:] != ordered[:-1]]
    run_of = np.cumsum(starts_run) - 1  # which run of equal values each sorted position is in
    starts = np.flatnonzero(starts_run)
    ends = np.r_[starts[1:], values.size]  # a run covers sorted positions start..end-1, ranks start+1..end
    ranks = np.empty(values.size)
    ranks[order] = ((starts + 1 + ends) / 2)[run_of]
    return ranks


def auroc(scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> float:
    """Probability that a random right answer scores above a random wrong one (ties count half).

    The Mann–Whitney U statistic over tie-averaged ranks; needs both right and wrong answers.
    """
    values, truth = _paired(scores, labels, "scores")
    n_right = int(truth.sum())
    n_wrong = truth.size - n_right
    if n_right == 0 or n_wrong == 0:
        raise InputError(f"AUROC needs both right and wrong answers; all {truth.size} are "
                         f"{'right' if n_wrong == 0 else 'wrong'}")
    rank_sum = average_ranks(values)[truth].sum()
    return float((rank_sum - n_right * (n_right + 1) / 2) / (n_right * n_wrong))


@dataclass(frozen=True)
class ReliabilityBin:
    """One equal-width confidence bin: the answers whose confidence fell in [low, high)."""

    low: float
    high: float
    mean_confidence: float
    share_right: float
    n: int


def _bin_of(probs: np.ndarray, bins: int) -> np.ndarray:
    # Bin k holds [k/bins, (k+1)/bins); a confidence of exactly 1 belongs to the last bin.
    return np.minimum((probs * bins).astype(int), bins - 1)


def reliability_bins(probs: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray,
                     bins: int = 10) -> list[ReliabilityBin]:
    """Mean confidence and share right per equal-width bin of [0, 1], lowest first; empty bins left out."""
    array, truth = _probabilities(probs, labels, bins)
    which = _bin_of(array, bins)
    out = []
    for k in np.unique(which):
        members = which == k
        out.append(ReliabilityBin(low=k / bins, high=(k + 1) / bins, mean_confidence=float(array[members].mean()),
                                  share_right=float(truth[members].mean()), n=int(members.sum())))
    return out


def expected_calibration_error(probs: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray,
                               bins: int = 10) -> float:
    """Mean gap between confidence and share right over equal-width bins, each weighted by its answers."""
    filled = reliability_bins(probs, labels, bins)
    total = sum(b.n for b in filled)
    return float(sum(b.n * abs(b.mean_confidence - b.share_right) for b in filled) / total)


def coverage_curve(confidences: Sequence[float] | np.ndarray,
                   qualities: Sequence[float] | np.ndarray) -> list[tuple[float, float]]:
    """(share answered, mean quality of those answered) when answering only the k most confident, k = 1..n.

    Questions are taken in order of confidence, highest first; equal confidences keep their given order.
    """
    conf = _scores(confidences, "confidences")
    quality = _scores(qualities, "qualities")
    if quality.shape != conf.shape:
        raise InputError(f"confidences and qualities differ in length ({conf.size} and {quality.size}); pass "
                         "one quality per confidence")
    order = np.argsort(-conf, kind="stable")
    answered = np.arange(1, conf.size + 1)
    means = np.cumsum(quality[order]) / answered
    return [(float(k / conf.size), float(m)) for k, m in zip(answered, means, strict=True)]
