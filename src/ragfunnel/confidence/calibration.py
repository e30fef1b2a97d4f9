"""The calibrated confidence: a logistic model per method from named signals to P(answer is right).

A method records numeric signals about each answer (``answer_logprob_mean``, ``draft_agreement``,
``support`` ...; which ones depends on the method). :func:`fit_calibration` fits, on eval rows whose
answers are known right or wrong, one logistic regression per method over standardised signals (and
a ``default`` one over every row, used by any other method); :class:`CalibrationFile` holds them with
the fingerprints of the models whose answers they were fitted on, and :func:`load_calibration`
finds the file to use: ``--calibration FILE``, else ``$RAGFUNNEL_CALIBRATION``, else the one shipped
beside this module.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragfunnel.confidence.measures import auroc, expected_calibration_error
from ragfunnel.confidence.signals import EXPECTED_DIRECTION
from ragfunnel.errors import ConfigError, InputError

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
SHIPPED = Path(__file__).with_name("calibration.json")
ENV_VAR = "RAGFUNNEL_CALIBRATION"
DEFAULT_MODEL = "default"  # the model for any method without its own
MIN_ROWS = 30  # rows a model is fitted on, at the least (both right and wrong among them)
FOLDS = 5  # cross-validation folds of the held-out statistics
# Held-out AUROC a model needs before its confidence may steer anything (auto's escalation): 0.5 is a coin.
EARNED_AUROC = 0.6
# A confidence never claims certainty: the signals cannot rule out a wrong reference or a lucky guess.
FLOOR, CEILING = 0.01, 0.99


def _signal(signals: Mapping[str, Any], name: str) -> float:
    """The value of one signal; NaN when it is absent or not a number."""
    value = signals.get(name)
    if value is None or isinstance(value, str):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True)
class Calibrator:
    """A logistic regression over standardised signals: P(right) = sigmoid(bias + sum w_i (x_i - mean_i) / scale_i)."""

    method: str
    features: tuple[str, ...]
    means: tuple[float, ...]
    scales: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float

    def __post_init__(self) -> None:
        n = len(self.features)
        if not (len(self.means) == len(self.scales) == len(self.weights) == n):
            raise InputError(f"calibration model {self.method!r} has {n} features but {len(self.means)} means, "
                             f"{len(self.scales)} scales and {len(self.weights)} weights; refit it")
        if len(set(self.features)) != n:
            raise InputError(f"calibration model {self.method!r} names a feature twice; refit it")
        numbers = [*self.means, *self.scales, *self.weights, self.bias]
        if not all(math.isfinite(x) for x in numbers) or not all(s > 0 for s in self.scales):
            raise InputError(f"calibration model {self.method!r} holds a non-finite number or a scale <= 0; "
                             "refit it")

    def predict(self, signals: Mapping[str, float]) -> float:
        """P(right) for an answer with these signals, in [0.01, 0.99].

        A missing or non-finite signal takes its training mean: it moves the prediction neither way.
        """
        x = np.array([_signal(signals, name) for name in self.features])
        z = (x - np.array(self.means)) / np.array(self.scales)
        z[~np.isfinite(z)] = 0.0
        logit = self.bias + float(z @ np.array(self.weights))
        return min(CEILING, max(FLOOR, _sigmoid(logit)))


def _sigmoid(logit: float) -> float:
    return 0.5 * (1.0 + math.tanh(logit / 2))  # no overflow for any logit


def model_key(method: str) -> str:
    """The model name a method's rows and answers go under: ``auto:fb`` is answered by, and is, ``fb``."""
    return method.removeprefix("auto:")


@dataclass(frozen=True)
class CalibrationFile:
    """The calibration models and what they were fitted on.

    An empty file (no models: nothing shipped and nothing given) gives no confidence at all:
    :meth:`confidence` returns None, so an answer shows none rather than a made-up one.
    """

    version: int = FORMAT_VERSION
    models: dict[str, Calibrator] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)  # role ("strong", "light") -> weights fingerprint
    fitted_on: str = ""  # which runs, how many rows
    n_rows: dict[str, int] = field(default_factory=dict)  # model name -> rows it was fitted on
    held_out: dict[str, dict[str, float]] = field(default_factory=dict)  # model name -> e.g. {"auroc": 0.8}

    def __post_init__(self) -> None:
        if self.models and DEFAULT_MODEL not in self.models:
            raise InputError(f"calibration field 'models' has no {DEFAULT_MODEL!r} model, which answers for every "
                             "method without its own; refit with `ragfunnel calibrate`")

    def model_for(self, method: str) -> str | None:
        """The name of the model that scores ``method`` (None when the file has no models)."""
        if not self.models:
            return None
        key = model_key(method)
        return key if key in self.models else DEFAULT_MODEL

    def earned(self, method: str, *, min_auroc: float = EARNED_AUROC) -> bool:
        """Whether the model scoring ``method`` told right from wrong on rows it was not fitted on: its
        cross-validated AUROC reaches ``min_auroc``. False without held-out statistics or models."""
        name = self.model_for(method)
        shown = self.held_out.get(name, {}).get("auroc") if name is not None else None
        return shown is not None and shown >= min_auroc

    def confidence(self, method: str, signals: Mapping[str, float]) -> float | None:
        """P(right) of an answer of ``method`` with these signals; None when the file has no models."""
        name = self.model_for(method)
        return None if name is None else self.models[name].predict(signals)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "models": {name: {"features": list(m.features), "means": list(m.means), "scales": list(m.scales),
                              "weights": list(m.weights), "bias": m.bias} for name, m in self.models.items()},
            "fingerprints": dict(self.fingerprints),
            "fitted_on": self.fitted_on,
            "n_rows": dict(self.n_rows),
            "held_out": {name: dict(stats) for name, stats in self.held_out.items()},
        }

    @classmethod
    def from_json(cls, data: Any) -> CalibrationFile:
        """The file :meth:`to_json` wrote; anything else is an InputError naming the bad field."""
        if not isinstance(data, dict):
            raise InputError(f"a calibration file holds a JSON object, not a {type(data).__name__}")
        version = _field(data, "version", int)
        if version != FORMAT_VERSION:
            raise InputError(f"calibration format version {version} is not one this ragfunnel reads "
                             f"({FORMAT_VERSION}); refit with `ragfunnel calibrate` or upgrade ragfunnel")
        models = {}
        for name, raw in _field(data, "models", dict).items():
            where = f"models.{name}"
            if not isinstance(raw, dict):
                raise InputError(f"calibration field {where!r} is a {type(raw).__name__}, not an object")
            features = _field(raw, "features", list, where)
            if not all(isinstance(f, str) for f in features):
                raise InputError(f"calibration field '{where}.features' must list signal names")
            models[name] = Calibrator(
                method=name, features=tuple(features),
                **{k: tuple(_numbers(raw, k, where)) for k in ("means", "scales", "weights")},
                bias=float(_field(raw, "bias", int | float, where)),
            )
        fingerprints = _field(data, "fingerprints", dict)
        if not all(isinstance(v, str) for v in fingerprints.values()):
            raise InputError("calibration field 'fingerprints' must map roles to fingerprint strings")
        n_rows = _field(data, "n_rows", dict)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in n_rows.values()):
            raise InputError("calibration field 'n_rows' must map model names to row counts")
        held_out = data.get("held_out", {})
        if not isinstance(held_out, dict) or not all(
                isinstance(stats, dict) and _all_numbers(stats.values()) for stats in held_out.values()):
            raise InputError("calibration field 'held_out' must map model names to objects of numbers")
        return cls(version=version, models=models, fingerprints=dict(fingerprints),
                   fitted_on=_field(data, "fitted_on", str), n_rows=dict(n_rows),
                   held_out={name: {k: float(v) for k, v in stats.items()} for name, stats in held_out.items()})

    @classmethod
    def read(cls, path: str | Path) -> CalibrationFile:
        """The calibration in ``path``; a missing or damaged file is an InputError naming it."""
        path = Path(path)
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise InputError(f"calibration file {path} does not exist") from None
        except IsADirectoryError:
            raise InputError(f"calibration file {path} is a directory") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"calibration file {path} is not JSON ({type(e).__name__}); it is damaged: refit it "
                             "with `ragfunnel calibrate`") from None
        try:
            return cls.from_json(data)
        except InputError as e:
            raise InputError(f"calibration file {path}: {e}") from None

    def save(self, path: str | Path) -> None:
        """Write the file whole or not at all: a reader never sees half of it."""
        path = Path(path)
        partial = path.with_name(path.name + ".partial")
        with partial.open("w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)


def _field(data: dict[str, Any], name: str, kind: Any, where: str = "") -> Any:
    dotted = f"{where}.{name}" if where else name
    if name not in data:
        raise InputError(f"calibration field {dotted!r} is missing")
    value = data[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"calibration field {dotted!r} is a {type(value).__name__}, not the expected type")
    return value


def _all_numbers(values: Any) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _numbers(data: dict[str, Any], name: str, where: str) -> list[float]:
    values = _field(data, name, list, where)
    if not _all_numbers(values):
        raise InputError(f"calibration field '{where}.{name}' must be a list of numbers")
    return [float(v) for v in values]


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
            if math.isfinite(_signal(row, name)):
                counts[name] = counts.get(name, 0) + 1
    features = sorted(name for name, n in counts.items() if 2 * n >= len(signals))
    if not features:
        raise InputError(f"no signal is present in at least half of the {len(signals)} rows; re-run eval with this "
                         "version so rows carry signals")
    x = np.array([[_signal(row, name) for name in features] for row in signals])
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
    return CalibrationFile(models=models, fingerprints=dict(fingerprints), fitted_on=fitted_on,
                           n_rows={key: len(mine) for key, mine in groups.items()}, held_out=held_out)


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


def load_calibration(path: str | Path | None = None) -> CalibrationFile:
    """The calibration to use: ``path``, else ``$RAGFUNNEL_CALIBRATION``, else the shipped file.

    A given file that is missing or damaged costs one warning naming it, and the shipped file is
    used instead. Without a shipped file (or with a damaged one) the result is an empty
    :class:`CalibrationFile`, whose :meth:`~CalibrationFile.confidence` is None: answers then show no
    confidence rather than a made-up one.
    """
    chosen = path if path is not None else os.environ.get(ENV_VAR) or None
    if chosen is not None:
        try:
            return CalibrationFile.read(chosen)
        except InputError as e:
            fallback = "using the shipped calibration" if SHIPPED.exists() else "answers show no confidence"
            log.warning("%s; %s", e, fallback)
    if not SHIPPED.exists():
        return CalibrationFile()
    try:
        return CalibrationFile.read(SHIPPED)
    except InputError as e:
        log.warning("%s (the installed ragfunnel is damaged: reinstall it); answers show no confidence", e)
        return CalibrationFile()


_HEX_DIGEST = re.compile(r"[0-9a-f]{40,}")


def short_fingerprint(fingerprint: str) -> str:
    """A SHA-256 fingerprint cut to its first 12 hex digits; any other kind (a server's URL) as it is."""
    return fingerprint[:12] if _HEX_DIGEST.fullmatch(fingerprint) else fingerprint


def check_fingerprints(cal: CalibrationFile, current: Mapping[str, str]) -> None:
    """Warn, once per role, when a model's weights differ from those the calibration was fitted with.

    A role missing on either side (a method with no light model, an older file) is not checked.
    """
    for role, fitted in cal.fingerprints.items():
        now = current.get(role)
        if now is not None and now != fitted:
            log.warning("the calibration was fitted with %s model weights %s, but the %s model now has %s; its "
                        "confidences may be off: refit it with `ragfunnel calibrate` on eval runs of these models",
                        role, short_fingerprint(fitted), role, short_fingerprint(now))
