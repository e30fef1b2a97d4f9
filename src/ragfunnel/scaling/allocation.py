"""The computation allocation model for RAG (inference-scaling paper, Section 5; Appendices G and I).

    σ⁻¹(P(θ)) ≈ (a + b ⊙ i)ᵀ log(θ + ε) + c,    θ = (k, m, n),    i = (i_doc, i_shot, 0)

P is a configuration's mean metric on a task. i_doc = P(k=1, m=0) − P(k=0, m=0) and
i_shot = P(k=0, m=1) − P(k=0, m=0), both at n = 1, say how much one document and one
demonstration help on that task; like the paper, they are computed per method (DRAG, IterDRAG)
and task from its base configurations. a (3 values), b (3, b₃ fixed at 0) and c are shared by
every task: the paper estimates them once per model, so a new task needs only its base
configurations to get its own i and a prediction.

The fit is ordinary least squares of σ⁻¹(P) on the design matrix, one row per (task, configuration):

    [log(k+ε), log(m+ε), log(n+ε), i_doc·log(k+ε), i_shot·log(m+ε), 1]  ->  (a₁, a₂, a₃, b₁, b₂, c)

ε = 0.01 lets k = 0 and m = 0 in (the paper's shift). Parameters the data cannot tell apart are
held at 0 and reported as ``fixed``: a₃ when every point has the same n (log(n+ε) is then a
constant that c absorbs), b₁ (b₂) when every task has the same i_doc (i_shot) — then b⊙i is a
multiple of a, as with a single task.

Two scales for P (``normalize``):

- ``"none"``: P stays a proportion and σ is the standard logistic, so predictions are metrics in
  [0, 1]. Before the logit P is clipped to [δ, 1 − δ] with δ = 0.01: a configuration scoring 0 or 1
  has an infinite logit, and δ caps it at ±4.6.
- ``"dataset"`` (the paper, Appendix I): each dataset's metric is z-normalised over its fitted
  points (subtract the mean, divide by the standard deviation), so datasets of different
  difficulty share one model, and σ is a sigmoid fitted to the data, σ(x) = L + (U − L)/(1 + e^−x)
  (the paper's σ(x) = 3.30/(1 + e^{−1.81(x+0.46)}) − 2.18 has the same shape; its slope and shift
  are absorbed by a and c). The asymptotes L < min z and U > max z are chosen on a grid of margins
  beyond the observed range, each with its own least-squares fit, by the squared error of σ(x̂)
  against z. Predictions are then z-scores: they rank one task's configurations (which is all
  choosing a configuration needs, the scale of a new task being unknown) but are not metrics.
  i stays a difference of the raw metric, so a new task still needs only its base configurations.

Choosing a configuration with a fit is :mod:`ragfunnel.scaling.planner`'s work; testing the model on
datasets it was not fitted on, :mod:`ragfunnel.scaling.leave_one_out`'s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragfunnel.bounded import read_json_file
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.scaling.grid import Config
from ragfunnel.scaling.summary import ConfigSummary

log = logging.getLogger(__name__)

EPSILON = 0.01
DELTA = 0.01
PARAMETERS = ("a1", "a2", "a3", "b1", "b2", "c")  # b3 is 0 by the model's definition, not a parameter
BASE_THETAS = ((0, 0, 1), (1, 0, 1), (0, 1, 1))  # nothing, one document, one demonstration
NORMALIZATIONS = ("none", "dataset")
# How far beyond the observed z range (in multiples of it) the fitted sigmoid's asymptotes may lie.
SIGMOID_MARGINS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
FORMAT = "ragfunnel.allocation-fit/2"
OLD_FORMATS = ("ragfunnel.allocation-fit/1",)  # before normalisation: read as normalize="none"
MAX_FIT_BYTES = 16 << 20  # a fit is a few coefficients per task: kilobytes


@dataclass(frozen=True)
class Informativeness:
    """i = (i_doc, i_shot, 0) of one method on one task."""

    doc: float
    shot: float


@dataclass(frozen=True)
class Observation:
    """A configuration's mean metric (a proportion) and mean effective context length on one task."""

    config: Config
    metric: float
    effective_tokens: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.metric <= 1.0:
            raise InputError(f"{self.config.label}: metric {self.metric} is not a proportion in [0, 1]")


@dataclass(frozen=True)
class Task:
    """The observations of one method on one task, with that task's i. ``dataset`` groups tasks for
    per-dataset normalisation (a grid run's DRAG and IterDRAG tasks share it); it defaults to ``name``."""

    name: str
    method: str
    i: Informativeness
    observations: tuple[Observation, ...]
    dataset: str = ""

    def __post_init__(self) -> None:
        foreign = [o.config.label for o in self.observations if o.config.method != self.method]
        if foreign:
            raise ConfigError(f"task {self.name!r} is for method {self.method} but holds {', '.join(foreign)}")
        if not self.dataset:
            object.__setattr__(self, "dataset", self.name)


def informativeness(observations: Iterable[Observation], method: str, *, task: str = "the task") -> Informativeness:
    """i of ``method`` from its base configurations among ``observations``."""
    at = {o.config.theta: o.metric for o in observations if o.config.method == method}
    missing = [Config.for_theta(method, *theta).label for theta in BASE_THETAS if theta not in at]
    if missing:
        raise ConfigError(f"{task} lacks the base configuration(s) {', '.join(missing)} that i_doc and i_shot come "
                          "from; run them too (a grid whose k and m include 0 and 1)")
    zero = at[(0, 0, 1)]
    return Informativeness(doc=at[(1, 0, 1)] - zero, shot=at[(0, 1, 1)] - zero)


def tasks_from_summaries(name: str, summaries: Iterable[ConfigSummary], metric: str) -> list[Task]:
    """One task per method in the grid run of dataset ``name``, each with its own i; configurations that
    never answered are left out. A method lacking its base configurations is left out (with a warning)
    when the other has them, and is an error when neither has."""
    summaries = list(summaries)
    tasks, lacking = [], []
    for method in ("drag", "iterdrag"):
        obs = [Observation(s.config, s.metric(metric), s.effective_tokens) for s in summaries
               if s.config.method == method and s.effective_tokens is not None]
        if not obs:
            continue
        label = f"{name} [{method}]"
        try:
            tasks.append(Task(label, method, informativeness(obs, method, task=label), tuple(obs), dataset=name))
        except ConfigError as e:
            lacking.append(str(e))
    if not tasks:
        if lacking:
            raise ConfigError(lacking[0])
        raise InputError(f"{name} has no answered configuration to fit; run `ragfunnel scale grid` first")
    for reason in lacking:
        log.warning("left out: %s", reason)
    return tasks


def _features(config: Config, i: Informativeness, epsilon: float) -> np.ndarray:
    x = np.log(np.asarray(config.theta, dtype=float) + epsilon)
    return np.array([x[0], x[1], x[2], i.doc * x[0], i.shot * x[1], 1.0])


def _logit(p: np.ndarray, delta: float) -> np.ndarray:
    p = np.clip(p, delta, 1.0 - delta)
    return np.log(p / (1.0 - p))


def _sigmoid(z: np.ndarray | float) -> np.ndarray | float:
    return 1.0 / (1.0 + np.exp(-z))


def _r2(y: np.ndarray, predicted: np.ndarray) -> float | None:
    """None when y is constant: there is no variance to explain."""
    total = float(np.sum((y - y.mean()) ** 2))
    return None if total == 0.0 else 1.0 - float(np.sum((y - predicted) ** 2)) / total


@dataclass(frozen=True)
class DatasetScale:
    """How a fitted dataset's metric was normalised: z = (P − mean) / std over its fitted points."""

    dataset: str
    mean: float
    std: float


@dataclass(frozen=True)
class AllocationFit:
    """Fitted a, b (b₃ = 0), c with their goodness of fit, and the tasks they were fitted on.

    ``r2_logit``/``mse_logit`` are in the space of the least squares (σ⁻¹ of P, or of its z-score);
    ``r2_metric``/``mse_metric`` compare the fitted points' predictions with their actual metric
    (under ``normalize="dataset"`` a prediction is turned back into a metric with its dataset's scale).
    """

    metric: str
    a: tuple[float, float, float]
    b: tuple[float, float, float]
    c: float
    fixed: tuple[str, ...]  # parameters the data could not identify, held at 0
    r2_logit: float | None
    mse_logit: float
    r2_metric: float | None
    mse_metric: float
    tasks: tuple[Task, ...]
    epsilon: float = EPSILON
    delta: float = DELTA
    normalize: str = "none"
    sigmoid: tuple[float, float] = (0.0, 1.0)  # σ's lower and upper asymptotes L and U
    scales: tuple[DatasetScale, ...] = ()  # one per fitted dataset under normalize="dataset"

    def __post_init__(self) -> None:
        if self.normalize not in NORMALIZATIONS:
            raise ConfigError(f"unknown normalize {self.normalize!r}; valid: {', '.join(NORMALIZATIONS)}")

    @property
    def n_points(self) -> int:
        return sum(len(t.observations) for t in self.tasks)

    @property
    def unit(self) -> str:
        """What :meth:`predict` returns: the metric, or its per-dataset z-score."""
        return self.metric if self.normalize == "none" else f"{self.metric} z-score"

    def predict_logit(self, config: Config, i: Informativeness) -> float:
        """The linear part, (a + b ⊙ i)ᵀ log(θ + ε) + c."""
        weights = np.array([*self.a, self.b[0], self.b[1], self.c])
        return float(_features(config, i, self.epsilon) @ weights)

    def predict(self, config: Config, i: Informativeness) -> float:
        """The predicted score of ``config`` on a task with informativeness ``i``: its mean metric under
        ``normalize="none"``, its z-score among the task's configurations under ``"dataset"``."""
        lower, upper = self.sigmoid
        return float(lower + (upper - lower) * _sigmoid(self.predict_logit(config, i)))

    def predict_metric(self, config: Config, i: Informativeness, dataset: str) -> float:
        """The predicted mean metric on ``dataset``, one of the fitted ones when normalised (its scale is known)."""
        if self.normalize == "none":
            return self.predict(config, i)
        scale = next((s for s in self.scales if s.dataset == dataset), None)
        if scale is None:
            raise ConfigError(f"{dataset!r} is not one of the fitted datasets "
                              f"({', '.join(s.dataset for s in self.scales)}), so its metric scale is unknown; "
                              "compare its configurations with predict() instead")
        return scale.mean + scale.std * self.predict(config, i)

    def parameters(self) -> dict[str, Any]:
        """Everything but the tasks' observations, as JSON."""
        return {
            "format": FORMAT, "metric": self.metric, "normalize": self.normalize, "epsilon": self.epsilon,
            "delta": self.delta, "a": list(self.a), "b": list(self.b), "c": self.c, "fixed": list(self.fixed),
            "sigmoid": {"lower": self.sigmoid[0], "upper": self.sigmoid[1]},
            "datasets": [{"name": s.dataset, "mean": s.mean, "std": s.std} for s in self.scales],
            "r2_logit": self.r2_logit, "mse_logit": self.mse_logit,
            "r2_metric": self.r2_metric, "mse_metric": self.mse_metric, "n_points": self.n_points,
        }

    def to_json(self) -> dict[str, Any]:
        return self.parameters() | {
            "tasks": [{"name": t.name, "dataset": t.dataset, "method": t.method, "i_doc": t.i.doc,
                       "i_shot": t.i.shot,
                       "observations": [{"strategy": o.config.strategy, "documents": o.config.documents,
                                         "shots": o.config.shots, "iterations": o.config.iterations,
                                         "metric": o.metric, "effective_tokens": o.effective_tokens}
                                        for o in t.observations]}
                      for t in self.tasks],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AllocationFit:
        tasks = tuple(
            Task(t["name"], t["method"], Informativeness(t["i_doc"], t["i_shot"]),
                 tuple(Observation(Config(o["strategy"], o["documents"], o["shots"], o["iterations"]),
                                   o["metric"], o["effective_tokens"]) for o in t["observations"]),
                 dataset=t.get("dataset", ""))
            for t in data["tasks"])
        sigmoid = data.get("sigmoid", {"lower": 0.0, "upper": 1.0})
        return cls(data["metric"], tuple(data["a"]), tuple(data["b"]), data["c"], tuple(data["fixed"]),
                   data["r2_logit"], data["mse_logit"], data["r2_metric"], data["mse_metric"], tasks,
                   data["epsilon"], data["delta"], normalize=data.get("normalize", "none"),
                   sigmoid=(sigmoid["lower"], sigmoid["upper"]),
                   scales=tuple(DatasetScale(s["name"], s["mean"], s["std"]) for s in data.get("datasets", [])))


def _unidentifiable(tasks: Sequence[Task]) -> tuple[str, ...]:
    def same(values: list[float]) -> bool:  # up to float rounding: 0.3 − 0.2 and 0.1 − 0.0 are one i
        return max(values) - min(values) < 1e-9

    fixed = []
    if len({o.config.iterations for t in tasks for o in t.observations}) < 2:
        fixed.append("a3")
    if same([t.i.doc for t in tasks]):
        fixed.append("b1")
    if same([t.i.shot for t in tasks]):
        fixed.append("b2")
    return tuple(fixed)


def _least_squares(design: np.ndarray, y: np.ndarray, free: list[int]) -> np.ndarray:
    weights = np.zeros(design.shape[1])
    weights[free] = np.linalg.lstsq(design[:, free], y, rcond=None)[0]
    return weights


def dataset_scales(tasks: Sequence[Task]) -> tuple[DatasetScale, ...]:
    """Each dataset's metric mean and standard deviation over its tasks' observations (both methods together,
    so DRAG and IterDRAG stay comparable)."""
    by_dataset: dict[str, list[float]] = {}
    for t in tasks:
        by_dataset.setdefault(t.dataset, []).extend(o.metric for o in t.observations)
    scales = []
    for dataset, values in by_dataset.items():
        std = float(np.std(values))
        if std == 0.0:
            raise ConfigError(f"{dataset}: every configuration scores {values[0]:g}, so its metric cannot be "
                              "normalised; fit with normalize 'none', choose another metric, or leave it out")
        scales.append(DatasetScale(dataset, float(np.mean(values)), std))
    return tuple(scales)


def _fit_sigmoid(design: np.ndarray, z: np.ndarray, free: list[int]) -> tuple[float, float, np.ndarray]:
    """The asymptotes L, U (on the grid of SIGMOID_MARGINS beyond z's range) and weights whose
    σ(x̂) = L + (U − L)/(1 + e^−x̂) is closest to z in squared error; each (L, U) gets its own least squares
    of log((z − L)/(U − z)). Ties go to the narrower range."""
    low, high = float(z.min()), float(z.max())
    span = high - low
    tried = []
    for below in SIGMOID_MARGINS:
        for above in SIGMOID_MARGINS:
            lower, upper = low - below * span, high + above * span
            weights = _least_squares(design, np.log((z - lower) / (upper - z)), free)
            error = float(np.mean((z - (lower + (upper - lower) * _sigmoid(design @ weights))) ** 2))
            tried.append((error, lower, upper, weights))
    _, lower, upper, weights = min(tried, key=lambda t: t[0])  # the first of equals: the narrowest
    return lower, upper, weights


def fit(tasks: Sequence[Task], *, metric: str, delta: float = DELTA, epsilon: float = EPSILON,
        normalize: str = "none") -> AllocationFit:
    """Least-squares fit of a, b and c shared by ``tasks``, each task with its own i; ``normalize`` is
    "none" (P as a proportion, the standard logistic) or "dataset" (the paper: per-dataset z-scores and a
    fitted sigmoid)."""
    if normalize not in NORMALIZATIONS:
        raise ConfigError(f"unknown normalize {normalize!r}; valid: {', '.join(NORMALIZATIONS)}")
    if not 0.0 < delta < 0.5:
        raise ConfigError(f"delta must be in (0, 0.5), got {delta}")
    if epsilon <= 0.0:
        raise ConfigError(f"epsilon must be > 0 (it keeps log(0) away), got {epsilon}")
    pairs = [(t, o) for t in tasks for o in t.observations]
    fixed = _unidentifiable(tasks) if pairs else ()
    free = [j for j, name in enumerate(PARAMETERS) if name not in fixed]
    if len(pairs) < len(free) + 1:  # one more than the parameters, or the fit is exact and says nothing
        raise ConfigError(f"the allocation model needs at least {len(free) + 1} (task, configuration) points to fit "
                          f"its {len(free)} free parameters ({', '.join(PARAMETERS[j] for j in free)}), got "
                          f"{len(pairs)}; run more configurations (more values of k, m or n)")
    design = np.array([_features(o.config, t.i, epsilon) for t, o in pairs])
    actual = np.array([o.metric for _, o in pairs])
    if np.linalg.matrix_rank(design[:, free]) < len(free):
        raise ConfigError(f"the configurations do not pin down {', '.join(PARAMETERS[j] for j in free)}: too few "
                          "distinct values of k, m or n; run more configurations")
    if fixed:
        log.info("holding %s at 0: the data cannot identify them", ", ".join(fixed))
    if normalize == "none":
        scales: tuple[DatasetScale, ...] = ()
        lower, upper = 0.0, 1.0
        y = _logit(actual, delta)
        weights = _least_squares(design, y, free)
        predicted_metric = np.asarray(_sigmoid(design @ weights))
    else:
        scales = dataset_scales(tasks)
        by_name = {s.dataset: s for s in scales}
        mean = np.array([by_name[t.dataset].mean for t, _ in pairs])
        std = np.array([by_name[t.dataset].std for t, _ in pairs])
        z = (actual - mean) / std
        lower, upper, weights = _fit_sigmoid(design, z, free)
        y = np.log((z - lower) / (upper - z))
        predicted_metric = mean + std * (lower + (upper - lower) * np.asarray(_sigmoid(design @ weights)))
    predicted = design @ weights
    return AllocationFit(
        metric=metric, a=tuple(float(w) for w in weights[:3]), b=(float(weights[3]), float(weights[4]), 0.0),
        c=float(weights[5]), fixed=fixed,
        r2_logit=_r2(y, predicted), mse_logit=float(np.mean((y - predicted) ** 2)),
        r2_metric=_r2(actual, predicted_metric), mse_metric=float(np.mean((actual - predicted_metric) ** 2)),
        tasks=tuple(tasks), epsilon=epsilon, delta=delta, normalize=normalize, sigmoid=(lower, upper), scales=scales,
    )


def save_fit(allocation: AllocationFit, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(allocation.to_json(), indent=2) + "\n", encoding="utf-8")
    return path


def load_fit(path: str | Path) -> AllocationFit:
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a directory; pass the fit file in it that `ragfunnel scale fit` wrote "
                         "(allocation.json by default)")
    try:
        data = read_json_file(path, max_bytes=MAX_FIT_BYTES, what="allocation fit",
                              fix="write one with `ragfunnel scale fit RUNDIR`")
        if data.get("format") not in (FORMAT, *OLD_FORMATS):
            raise KeyError("format")
        return AllocationFit.from_json(data)
    except FileNotFoundError:
        raise InputError(f"{path} does not exist; write a fit with `ragfunnel scale fit RUNDIR --out {path}`") from None
    except (ValueError, KeyError, TypeError, AttributeError, ConfigError) as e:
        raise InputError(f"{path} is not an allocation fit ({type(e).__name__}: {e}); "
                         "write one with `ragfunnel scale fit RUNDIR`") from None
