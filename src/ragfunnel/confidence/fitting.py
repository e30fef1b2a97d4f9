"""Fitting the calibration: one logistic regression per method on eval rows known right or wrong.

:func:`fit_calibration` fits the models and their held-out statistics (:func:`cross_validate`);
:func:`fit_logistic` is one model, by Newton's method. The result is a
:class:`~ragfunnel.confidence.calibration.CalibrationFile`, which reads, saves and applies them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ragfunnel.confidence.calibration import (
    DEFAULT_MODEL,
    SUPPORTED_AT,
    CalibrationFile,
    Calibrator,
    model_key,
    signal_value,
)
from ragfunnel.confidence.measures import auroc, expected_calibration_error
from ragfunnel.confidence.signals import EXPECTED_DIRECTION
from ragfunnel.errors import ConfigError, InputError

MIN_ROWS = 30  # rows a model is fitted on, at the least (both right and wrong among them)
FOLDS = 5  # cross-validation folds of the held-out statistics
# An answer is flagged unsupported below the confidence under which at most this share of answers were right.
UNSUPPORTED_RIGHT_AT_MOST = 0.25


def fit_logistic(signals: Sequence[Mapping[str, float]], right: Sequence[bool], *, l2: float = 1.0,
                 method: str = DEFAULT_MODEL) -> Calibrator:
    """A logistic regression of ``right`` on the signals, by Newton's method (IRLS).

    The features are the signal names present and finite in at least half the rows, standardised to
    mean 0 and scale 1 over the rows that have them; a row lacking one counts as its mean. ``l2``
    penalises the weights (not the bias), which keeps them finite when the signals separate right
    from wrong perfectly.
    """
    if not l2 > 0:
        raise ConfigError(f"l2 must be above 0 (it keeps separable data finite), got {l2}")
    if len(signals) != len(right):
        raise InputError(f"{len(signals)} rows of signals but {len(right)} verdicts; pass one verdict per row")
    y = np.array(right, dtype=float)
    if y.size == 0 or y.min() == y.max():
        raise InputError(f"a calibration model needs both right and wrong answers; got {int(y.sum())} right of "
                         f"{y.size}")
    counts: dict[str, int] = {}
    for row in signals:
        for name in row:
            if math.isfinite(signal_value(row, name)):
                counts[name] = counts.get(name, 0) + 1
    features = sorted(name for name, n in counts.items() if 2 * n >= len(signals))
    if not features:
        raise InputError(f"no signal is present in at least half of the {len(signals)} rows; re-run eval with this "
                         "version so rows carry signals")
    x = np.array([[signal_value(row, name) for name in features] for row in signals])
    known = np.isfinite(x)
    means = np.array([x[known[:, j], j].mean() for j in range(x.shape[1])])
    scales = np.array([x[known[:, j], j].std() for j in range(x.shape[1])])
    scales[scales < 1e-12] = 1.0  # a constant signal says nothing; its weight stays 0 under the penalty
    z = np.where(known, (x - means) / scales, 0.0)
    # A signal whose fitted weight points against its known direction (a likelier answer less often
    # right) is fitting noise in these rows: drop the worst such one and fit again.
    kept = list(range(len(features)))
    while True:
        weights, bias = _newton(z[:, kept], y, l2)
        wrong = [(weights[i] * EXPECTED_DIRECTION[features[j]], i) for i, j in enumerate(kept)
                 if features[j] in EXPECTED_DIRECTION and weights[i] * EXPECTED_DIRECTION[features[j]] < 0]
        if not wrong or len(kept) == 1:
            break
        kept.pop(min(wrong)[1])
    features = [features[j] for j in kept]
    means, scales = means[kept], scales[kept]
    return Calibrator(method=method, features=tuple(features), means=tuple(means.tolist()),
                      scales=tuple(scales.tolist()), weights=tuple(weights.tolist()), bias=bias)


def _newton(z: np.ndarray, y: np.ndarray, l2: float, *, steps: int = 100) -> tuple[np.ndarray, float]:
    """Minimise the penalised negative log-likelihood; the bias is the last coefficient, unpenalised."""
    design = np.hstack([z, np.ones((z.shape[0], 1))])
    penalty = np.full(design.shape[1], l2)
    penalty[-1] = 0.0
    # Start at the base rate, where the weights are 0: the loss only falls from there.
    base = y.mean()
    beta = np.zeros(design.shape[1])
    beta[-1] = math.log(base / (1 - base))

    def loss(b: np.ndarray) -> float:
        logits = design @ b
        return float(np.sum(np.logaddexp(0.0, logits) - y * logits) + 0.5 * np.sum(penalty * b * b))

    current = loss(beta)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(design @ beta, -30, 30)))
        gradient = design.T @ (p - y) + penalty * beta
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hessian, gradient)
        scale = 1.0
        while scale > 1e-6 and loss(beta - scale * step) > current:  # a full Newton step can overshoot
            scale /= 2
        beta = beta - scale * step
        previous, current = current, loss(beta)
        if np.max(np.abs(scale * step)) < 1e-9 or previous - current < 1e-12:
            break
    return beta[:-1], float(beta[-1])


Row = tuple[str, Mapping[str, float], bool | None]  # (method, signals, right)


def fit_calibration(rows: Sequence[Row], *, fingerprints: Mapping[str, str], fitted_on: str,
                    l2: float = 1.0) -> CalibrationFile:
    """Fit the calibration on ``(method, signals, right)`` rows, ``right`` None where it is not known.

    The usable rows are those with signals and a verdict. Each method with at least 30 of them, right
    and wrong among them, gets its own model; the ``default`` model is fitted on every usable row.
    Each model's ``held_out`` statistics (AUROC, ECE, rows) are those of its predictions in a
    stratified 5-fold cross-validation, each row predicted by a model fitted without it. Rows too
    few, all right or all wrong, without verdicts or without signals are an InputError saying what
    is missing.
    """
    judged = [r for r in rows if r[2] is not None]
    usable = [r for r in judged if r[1]]
    if len(usable) < MIN_ROWS:
        raise InputError(_too_few(len(rows), len(judged), len(usable), sum(1 for r in rows if r[1])))
    n_right = sum(1 for r in usable if r[2])
    if n_right in (0, len(usable)):
        every = "right" if n_right else "wrong"
        raise InputError(f"every one of the {len(usable)} usable rows is {every}; calibration needs right and wrong "
                         f"answers: run eval on {'harder' if n_right else 'easier'} questions, or more of them")
    groups = {DEFAULT_MODEL: usable}
    for key in dict.fromkeys(model_key(r[0]) for r in usable):
        mine = [r for r in usable if model_key(r[0]) == key]
        if key != DEFAULT_MODEL and len(mine) >= MIN_ROWS and 0 < sum(1 for r in mine if r[2]) < len(mine):
            groups[key] = mine
    models, held_out = {}, {}
    for key, mine in groups.items():
        signals, right = [r[1] for r in mine], [bool(r[2]) for r in mine]
        models[key] = fit_logistic(signals, right, l2=l2, method=key)
        if (stats := cross_validate(signals, right, l2=l2)) is not None:
            held_out[key] = stats
    default = models[DEFAULT_MODEL]
    supported_at = supported_threshold([default.predict(r[1]) for r in usable], [bool(r[2]) for r in usable])
    return CalibrationFile(models=models, fingerprints=dict(fingerprints), fitted_on=fitted_on,
                           n_rows={key: len(mine) for key, mine in groups.items()}, held_out=held_out,
                           supported_at=supported_at)


def supported_threshold(confidences: Sequence[float], right: Sequence[bool], *,
                        most_right: float = UNSUPPORTED_RIGHT_AT_MOST) -> float:
    """The highest confidence (on a 0.05 grid up to 0.5) under which at most ``most_right`` of the answers are
    right: answers below it are flagged unsupported. :data:`SUPPORTED_AT` when no such grid point flags any."""
    conf, ok = np.asarray(confidences, dtype=float), np.asarray(right, dtype=bool)
    best = None
    for t in np.arange(0.05, 0.501, 0.05):
        below = conf < t
        if below.any() and ok[below].mean() <= most_right:
            best = round(float(t), 2)
    return SUPPORTED_AT if best is None else best


def cross_validate(signals: Sequence[Mapping[str, float]], right: Sequence[bool], *, l2: float = 1.0,
                   folds: int = FOLDS) -> dict[str, float] | None:
    """AUROC and ECE of predictions each made by a model fitted without its row, over ``folds`` folds
    that share out the right and the wrong answers evenly; None when a fold's training rows cannot be
    fitted (one class only, or no signal in half of them)."""
    fold = np.empty(len(right), dtype=int)
    for verdict in (True, False):
        members = [i for i, r in enumerate(right) if r == verdict]
        fold[members] = np.arange(len(members)) % folds
    predicted = np.empty(len(right))
    for k in range(folds):
        train = np.flatnonzero(fold != k)
        try:
            model = fit_logistic([signals[i] for i in train], [right[i] for i in train], l2=l2)
        except InputError:
            return None
        for i in np.flatnonzero(fold == k):
            predicted[i] = model.predict(signals[i])
    return {"auroc": auroc(predicted, right), "ece": expected_calibration_error(predicted, right),
            "rows": float(len(right))}


def _too_few(n: int, judged: int, usable: int, with_signals: int) -> str:
    if n == 0:
        return "there are no rows to fit on; pass run directories of `ragfunnel eval` that hold answered rows"
    if judged == 0:
        return (f"none of the {n} rows can be told right from wrong (no reference answers, or summaries scored "
                "by ROUGE-L alone); run eval on a dataset with reference answers")
    if with_signals == 0:
        return (f"none of the {n} rows carries confidence signals (they were written by an older ragfunnel); "
                "re-run eval with this version so rows carry signals")
    return (f"only {usable} of the {n} rows are usable ({n - judged} without a right/wrong verdict, {n - with_signals} "
            f"without signals); calibration needs at least {MIN_ROWS}: run eval on more questions")
