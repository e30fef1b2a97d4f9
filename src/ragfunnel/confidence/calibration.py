"""The calibrated confidence: a logistic model per method from named signals to P(answer is right).

A method records numeric signals about each answer (``answer_logprob_mean``, ``draft_agreement``,
``support`` ...; which ones depends on the method). :class:`Calibrator` is one logistic regression
over standardised signals (fitted in :mod:`ragfunnel.confidence.fitting`, one per method and a
``default`` one used by any other method); :class:`CalibrationFile` holds them with
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
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragfunnel.atomic import write_atomic
from ragfunnel.bounded import RefusedPath, read_json_file
from ragfunnel.errors import InputError

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
SHIPPED = Path(__file__).with_name("calibration.json")
ENV_VAR = "RAGFUNNEL_CALIBRATION"
DEFAULT_MODEL = "default"  # the model for any method without its own
# Held-out AUROC a model needs before its confidence may steer anything (auto's escalation): 0.5 is a coin.
EARNED_AUROC = 0.6
# A confidence never claims certainty: the signals cannot rule out a wrong reference or a lucky guess.
FLOOR, CEILING = 0.01, 0.99
# Below this confidence an answer is flagged ``supported: false`` (a file may set its own, from its
# risk-coverage curve: ``supported_at``). 0.5: more likely wrong than right.
SUPPORTED_AT = 0.5
MAX_BYTES = 4 << 20  # a fitted file is a few kilobytes: a model per method, a few signals each
_CALIBRATION_FIX = "pass a file `ragfunnel calibrate` wrote, or refit one with it"


def signal_value(signals: Mapping[str, Any], name: str) -> float:
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
        x = np.array([signal_value(signals, name) for name in self.features])
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
    supported_at: float = SUPPORTED_AT  # the confidence under which an answer is flagged unsupported

    def __post_init__(self) -> None:
        if not 0.0 <= self.supported_at <= 1.0:
            raise InputError(f"calibration field 'supported_at' must be in [0, 1], got {self.supported_at}")
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

    def supported(self, confidence: float | None) -> bool | None:
        """Whether an answer with this confidence counts as supported (None: no confidence to tell by)."""
        return None if confidence is None else confidence >= self.supported_at

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "models": {name: {"features": list(m.features), "means": list(m.means), "scales": list(m.scales),
                              "weights": list(m.weights), "bias": m.bias} for name, m in self.models.items()},
            "fingerprints": dict(self.fingerprints),
            "fitted_on": self.fitted_on,
            "n_rows": dict(self.n_rows),
            "held_out": {name: dict(stats) for name, stats in self.held_out.items()},
            "supported_at": self.supported_at,
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
        supported_at = data.get("supported_at", SUPPORTED_AT)
        if not _all_numbers([supported_at]):
            raise InputError("calibration field 'supported_at' must be a number")
        return cls(version=version, models=models, fingerprints=dict(fingerprints), supported_at=float(supported_at),
                   fitted_on=_field(data, "fitted_on", str), n_rows=dict(n_rows),
                   held_out={name: {k: float(v) for k, v in stats.items()} for name, stats in held_out.items()})

    @classmethod
    def read(cls, path: str | Path) -> CalibrationFile:
        """The calibration in ``path``; a missing or damaged file is an InputError naming it, and a path that
        is no file to read (a FIFO, a device, a folder, one past :data:`MAX_BYTES`) a :class:`RefusedPath`."""
        path = Path(path)
        try:
            data = read_json_file(path, max_bytes=MAX_BYTES, what="calibration file", fix=_CALIBRATION_FIX)
        except FileNotFoundError:
            raise InputError(f"calibration file {path} does not exist") from None
        try:
            return cls.from_json(data)
        except InputError as e:
            raise InputError(f"calibration file {path}: {e}") from None

    def save(self, path: str | Path) -> None:
        """Write the file whole or not at all: a reader never sees half of it."""
        write_atomic(path, json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n", fsync=True)


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


def load_calibration(path: str | Path | None = None) -> CalibrationFile:
    """The calibration to use: ``path``, else ``$RAGFUNNEL_CALIBRATION``, else the shipped file.

    A given file that is missing or damaged costs one warning naming it, and the shipped file is
    used instead. A given ``path`` that is no file to read (a FIFO, a device, a folder, one far too big)
    is a mistake in the command rather than a damaged file, and is raised (:class:`RefusedPath`, an
    InputError), as the CLI refuses a folder; from the environment it is warned about too. Without a
    shipped file (or with a damaged one) the result is an empty :class:`CalibrationFile`, whose
    :meth:`~CalibrationFile.confidence` is None: answers then show no confidence rather than a made-up one.
    """
    chosen = path if path is not None else os.environ.get(ENV_VAR) or None
    if chosen is not None:
        try:
            return CalibrationFile.read(chosen)
        except InputError as e:
            if path is not None and isinstance(e, RefusedPath):
                raise
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


_warned_fingerprints: set[tuple[str, str, str]] = set()  # (role, fitted, now) already warned about
_warned_lock = threading.Lock()


def check_fingerprints(cal: CalibrationFile, current: Mapping[str, str]) -> None:
    """Warn when a model's weights differ from those the calibration was fitted with: once per process for each
    role and pair of weights, however many answers a server gives with them.

    A role missing on either side (a method with no light model, an older file) is not checked.
    """
    for role, fitted in cal.fingerprints.items():
        now = current.get(role)
        if now is None or now == fitted:
            continue
        with _warned_lock:
            if (role, fitted, now) in _warned_fingerprints:
                continue
            _warned_fingerprints.add((role, fitted, now))
        log.warning("the calibration was fitted with %s model weights %s, but the %s model now has %s; its "
                    "confidences may be off: refit it with `ragfunnel calibrate` on eval runs of these models",
                    role, short_fingerprint(fitted), role, short_fingerprint(now))
