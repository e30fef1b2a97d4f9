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

The planner picks the configuration with the best prediction whose effective context length fits
a budget. Candidates the task never ran get their tokens from the task's per-unit costs
(:class:`TokenCosts`). :func:`leave_one_dataset_out` is the paper's domain-generalisation test
(Table 3): fit without a dataset, choose its configuration per budget, compare the choice's actual
score with the best the dataset's grid found and with a fixed-shot baseline.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from ragfunnel.errors import ConfigError, InputError
from ragfunnel.scaling.grid import (
    DEFAULT_DOCUMENTS,
    DEFAULT_ITERATIONS,
    DEFAULT_SHOTS,
    STRATEGIES,
    Config,
    ConfigSummary,
    default_grid,
    optimal_per_budget,
    within_budget,
)

log = logging.getLogger(__name__)

EPSILON = 0.01
DELTA = 0.01
PARAMETERS = ("a1", "a2", "a3", "b1", "b2", "c")  # b3 is 0 by the model's definition, not a parameter
BASE_THETAS = ((0, 0, 1), (1, 0, 1), (0, 1, 1))  # nothing, one document, one demonstration
NORMALIZATIONS = ("none", "dataset")
# How far beyond the observed z range (in multiples of it) the fitted sigmoid's asymptotes may lie.
SIGMOID_MARGINS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
BASELINE_SHOTS = 8  # the paper's Table 3 baseline: DRAG with 8 demonstrations, scaled by documents
FORMAT = "ragfunnel.allocation-fit/2"
OLD_FORMATS = ("ragfunnel.allocation-fit/1",)  # before normalisation: read as normalize="none"


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
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") not in (FORMAT, *OLD_FORMATS):
            raise KeyError("format")
        return AllocationFit.from_json(data)
    except FileNotFoundError:
        raise InputError(f"{path} does not exist; write a fit with `ragfunnel scale fit RUNDIR --out {path}`") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory; pass the fit file in it that `ragfunnel scale fit` wrote "
                         "(allocation.json by default)") from None
    except (ValueError, KeyError, TypeError, AttributeError, ConfigError) as e:
        raise InputError(f"{path} is not an allocation fit ({type(e).__name__}: {e}); "
                         "write one with `ragfunnel scale fit RUNDIR`") from None


# Token costs of configurations never run ---------------------------------------------------------

COST_TERMS = ("base", "per_document", "per_shot", "per_iteration")


def _cost_features(config: Config) -> np.ndarray:
    k, m, n = config.theta
    return np.array([1.0, k * (m + 1), m, n - 1], dtype=float)


@dataclass(frozen=True)
class TokenCosts:
    """One method's mean effective context length per answer on one task, as per-unit costs:

        tokens ≈ base + per_document · k · (m + 1) + per_shot · m + per_iteration · (n − 1)

    Each demonstration brings its own k documents (the paper's Figure 14), hence k · (m + 1);
    ``per_shot`` is a demonstration's question and answer. A cost is None when no measured
    configuration exercised it (every one had k = 0, m = 0 or the same n); only configurations
    that do not need it can then be estimated. DRAG's ``per_iteration`` is 0 (its n is always 1).
    IterDRAG's counts are rough: how many calls an answer makes depends on the model's replies.
    """

    method: str
    base: float
    per_document: float | None
    per_shot: float | None
    per_iteration: float | None = 0.0

    def estimate(self, config: Config) -> int:
        """Estimated mean effective context length of ``config`` (at least 1 token)."""
        if config.method != self.method:
            raise ConfigError(f"these token costs are {self.method}'s; {config.label} is run by {config.method}")
        costs = (self.base, self.per_document, self.per_shot, self.per_iteration)
        features = _cost_features(config)
        unknown = [COST_TERMS[j] for j, c in enumerate(costs) if c is None and features[j] != 0]
        if unknown:
            raise ConfigError(f"cannot estimate the tokens of {config.label}: no measured {self.method} configuration "
                              f"shows its {', '.join(unknown)} cost; run one with more documents, shots or "
                              "iterations")
        return max(1, round(sum(c * f for c, f in zip(costs, features, strict=True) if c is not None)))

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, **{t: getattr(self, t) for t in COST_TERMS}}


def _nonnegative_least_squares(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """min ‖x·w − y‖² subject to w ≥ 0, by least squares on every subset of columns (x has at most 4):
    the constrained optimum is the unconstrained one on its nonzero columns."""
    tried = []
    for size in range(x.shape[1], 0, -1):
        for columns in combinations(range(x.shape[1]), size):
            w = np.zeros(x.shape[1])
            w[list(columns)] = np.linalg.lstsq(x[:, list(columns)], y, rcond=None)[0]
            if (w >= 0).all():
                tried.append((float(np.sum((x @ w - y) ** 2)), w))
    return min(tried, key=lambda t: t[0])[1] if tried else np.zeros(x.shape[1])


def token_costs(observations: Iterable[Observation], method: str) -> TokenCosts:
    """``method``'s per-unit token costs from its measured configurations' mean effective context lengths:
    least squares in relative error (a 500-token configuration weighs as much as a 15k one), every cost ≥ 0."""
    obs = [o for o in observations if o.config.method == method]
    if not obs:
        raise ConfigError(f"no measured {method} configuration to estimate its token costs from")
    x = np.array([_cost_features(o.config) for o in obs])
    y = np.array([max(float(o.effective_tokens), 1.0) for o in obs])
    known = [j for j in range(x.shape[1]) if x[:, j].any()]
    if np.linalg.matrix_rank(x[:, known]) < len(known):
        raise ConfigError(f"the measured {method} configurations ({', '.join(o.config.label for o in obs)}) do not "
                          "pin down its per-document, per-shot and per-iteration token costs; run more "
                          "configurations (other k, m or n)")
    costs: list[float | None] = [None] * x.shape[1]
    solved = _nonnegative_least_squares(x[:, known] / y[:, None], np.ones(len(y)))
    for j, c in zip(known, solved, strict=True):
        costs[j] = float(c)
    if method == "drag":
        costs[3] = 0.0
    return TokenCosts(method, float(costs[0] or 0.0), costs[1], costs[2], costs[3])


@dataclass(frozen=True)
class TokenEstimator:
    """A configuration's effective context length on the target task: its measured mean when the task ran it,
    else an estimate from the task's per-unit ``costs``, else its mean on other grids (``elsewhere``)."""

    measured: Mapping[Config, float]
    costs: Mapping[str, TokenCosts] = field(default_factory=dict)
    elsewhere: Mapping[Config, float] = field(default_factory=dict)

    def source(self, config: Config) -> str | None:
        """Where the tokens of ``config`` come from: "task" (measured there), "costs" (the task's per-unit
        costs), "fit" (the mean on other grids), or None when nothing says."""
        if config in self.measured:
            return "task"
        if config.method in self.costs:
            try:
                self.costs[config.method].estimate(config)
                return "costs"
            except ConfigError:
                pass
        return "fit" if config in self.elsewhere else None

    def __call__(self, config: Config) -> int:
        source = self.source(config)
        if source == "task":
            return math.ceil(self.measured[config])  # a mean fits a budget exactly when its ceiling does
        if source == "costs":
            return self.costs[config.method].estimate(config)
        if source == "fit":
            return math.ceil(self.elsewhere[config])
        raise ConfigError(f"no token count for {config.label}: the task did not run it, its {config.method} token "
                          "costs are unknown and no fitted grid ran it")


def candidate_space(
    methods: Iterable[str],
    *,
    documents: Sequence[int] = DEFAULT_DOCUMENTS,
    shots: Sequence[int] = DEFAULT_SHOTS,
    iterations: Sequence[int] = DEFAULT_ITERATIONS,
) -> list[Config]:
    """Every configuration of ``methods`` ("drag": zero-shot, RAG and DRAG; "iterdrag") over k, m and n."""
    methods = set(methods)
    unknown = sorted(methods - {"drag", "iterdrag"})
    if unknown:
        raise ConfigError(f"unknown method {', '.join(map(repr, unknown))}; valid methods: drag, iterdrag")
    strategies = [s for s in STRATEGIES if ("iterdrag" if s == "iterdrag" else "drag") in methods]
    return default_grid(strategies, documents=documents, shots=shots, iterations=iterations) if strategies else []


# Planning ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanChoice:
    """A configuration within a budget with its predicted score (in the fit's ``unit``)."""

    config: Config
    predicted: float  # the model's predicted metric, or z-score under normalize="dataset"
    estimated_tokens: int
    budget: int
    considered: int  # candidates that fit the budget
    never_run: bool = False  # not among the configurations run on the task: its tokens are an estimate


def rank(
    allocation: AllocationFit,
    budget: int,
    candidates: Iterable[Config],
    estimate: Callable[[Config], int],
    i: Mapping[str, Informativeness],
    *,
    ran: Collection[Config] | None = None,
) -> list[PlanChoice]:
    """The candidates whose estimated effective context length fits ``budget``, best predicted first
    (ties go to the cheaper one). ``i`` maps each candidate method ("drag", "iterdrag") to the task's
    informativeness for it; ``ran`` holds the configurations run on the task (None: every candidate was)."""
    candidates = list(dict.fromkeys(candidates))
    lacking = sorted({c.method for c in candidates} - set(i))
    if lacking:
        raise ConfigError(f"no informativeness i for {', '.join(lacking)}; run its base configurations on the task, "
                          "or leave its candidates out")
    costs = {c: estimate(c) for c in candidates}
    fitting = within_budget(candidates, budget, costs.__getitem__)
    scored = sorted(((allocation.predict(c, i[c.method]), c) for c in fitting), key=lambda p: (-p[0], costs[p[1]]))
    return [PlanChoice(c, predicted, costs[c], budget, len(fitting), never_run=ran is not None and c not in ran)
            for predicted, c in scored]


def plan(
    allocation: AllocationFit,
    budget: int,
    candidates: Iterable[Config],
    estimate: Callable[[Config], int],
    i: Mapping[str, Informativeness],
    *,
    ran: Collection[Config] | None = None,
) -> PlanChoice:
    """The candidate with the highest predicted score among those whose estimated effective context
    length fits ``budget`` (ties go to the cheaper one); see :func:`rank`."""
    return rank(allocation, budget, candidates, estimate, i, ran=ran)[0]


# Leave one dataset out (the paper's Table 3) -------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """A configuration's actual mean metric and mean effective context length on the held-out dataset."""

    config: Config
    metric: float
    tokens: float

    @classmethod
    def of(cls, summary: ConfigSummary, metric: str) -> Scored:
        return cls(summary.config, summary.metric(metric), float(summary.effective_tokens or 0.0))

    def to_json(self) -> dict[str, Any]:
        c = self.config
        return {"strategy": c.strategy, "k": c.documents, "m": c.shots, "n": c.iterations, "metric": self.metric,
                "tokens": self.tokens}


@dataclass(frozen=True)
class HeldOutBudget:
    """One budget on the held-out dataset: the model's choice among the configurations the dataset ran (by
    the model fitted without it), the best of them (the oracle) and the fixed-shot baseline."""

    budget: int
    chosen: Scored
    predicted: float  # the model's score for ``chosen``, in the fit's unit
    considered: int  # the dataset's configurations (of methods with an i) within the budget
    oracle: Scored
    baseline: Scored | None  # None when no baseline configuration fits the budget

    def to_json(self) -> dict[str, Any]:
        return {"budget": self.budget, "chosen": self.chosen.to_json(), "predicted": self.predicted,
                "considered": self.considered, "oracle": self.oracle.to_json(),
                "baseline": None if self.baseline is None else self.baseline.to_json()}


@dataclass(frozen=True)
class HeldOutDataset:
    """A dataset held out: the fit on the others, its own i, and the choice per budget."""

    dataset: str
    fit: AllocationFit  # fitted on the other datasets only
    i: dict[str, Informativeness]
    baseline_shots: int | None  # the baseline's m on this dataset (None: it ran no DRAG with 1..m shots)
    rank_correlation: float | None  # Spearman ρ of predicted vs actual over its candidate configurations
    budgets: tuple[HeldOutBudget, ...]
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset,
                "fit": {k: v for k, v in self.fit.parameters().items() if k != "format"}
                | {"trained_on": sorted({t.dataset for t in self.fit.tasks})},
                "i": {m: {"doc": v.doc, "shot": v.shot} for m, v in self.i.items()},
                "baseline_shots": self.baseline_shots, "rank_correlation": self.rank_correlation,
                "budgets": [b.to_json() for b in self.budgets], "notes": list(self.notes)}


@dataclass(frozen=True)
class LeaveOneOutSummary:
    """Means over every (held-out dataset, budget): the model's choice, the oracle and the baseline."""

    cells: int
    chosen: float
    oracle: float
    ratio: float | None  # chosen / oracle (the paper: 96.6%); None when the oracle mean is 0
    matches: int  # cells where the choice scored as well as the oracle
    baseline: float | None  # over the ``baseline_cells`` that have a baseline
    chosen_where_baseline: float | None  # the choice's mean over those same cells
    baseline_cells: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LeaveOneOut:
    """Leave-one-dataset-out results, one entry per dataset held out."""

    metric: str
    normalize: str
    baseline_shots: int
    datasets: tuple[HeldOutDataset, ...]

    @property
    def summary(self) -> LeaveOneOutSummary:
        cells = [b for d in self.datasets for b in d.budgets]
        chosen = float(np.mean([b.chosen.metric for b in cells]))
        oracle = float(np.mean([b.oracle.metric for b in cells]))
        with_baseline = [b for b in cells if b.baseline is not None]
        return LeaveOneOutSummary(
            cells=len(cells), chosen=chosen, oracle=oracle, ratio=chosen / oracle if oracle else None,
            matches=sum(b.chosen.metric >= b.oracle.metric for b in cells),
            baseline=float(np.mean([b.baseline.metric for b in with_baseline])) if with_baseline else None,
            chosen_where_baseline=float(np.mean([b.chosen.metric for b in with_baseline])) if with_baseline else None,
            baseline_cells=len(with_baseline))

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "normalize": self.normalize, "baseline_shots": self.baseline_shots,
                "summary": self.summary.to_json(), "datasets": [d.to_json() for d in self.datasets]}


def _ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank."""
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for v in np.unique(values):
        tied = values == v
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation; None with fewer than 2 points or when either side is constant."""
    if len(x) < 2:
        return None
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0.0 or ry.std() == 0.0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def _baseline(summaries: Sequence[ConfigSummary], budget: int, shots: int | None) -> ConfigSummary | None:
    """DRAG with ``shots`` demonstrations and the most documents that fit ``budget`` (ties: cheaper)."""
    fits = [s for s in summaries if s.config.strategy == "drag" and s.config.shots == shots
            and s.effective_tokens is not None and s.effective_tokens <= budget]
    return max(fits, key=lambda s: (s.config.documents, -s.effective_tokens), default=None)


def leave_one_dataset_out(
    datasets: Mapping[str, Sequence[ConfigSummary]],
    budgets: Iterable[int],
    *,
    metric: str,
    normalize: str = "dataset",
    baseline_shots: int = BASELINE_SHOTS,
) -> LeaveOneOut:
    """The paper's domain generalisation (Table 3) over grid runs, one per dataset.

    For each dataset: fit a, b, c on the other datasets; take its i from its own base configurations;
    per budget, choose among the configurations it ran (of methods with an i) the one predicted best
    within the budget by its measured mean tokens; report that choice's actual ``metric`` next to the
    best configuration it ran within the budget (the oracle, over every method) and the paper's baseline,
    DRAG with ``baseline_shots`` demonstrations scaled by documents (the largest m ≤ ``baseline_shots``
    the dataset ran). A budget that no candidate fits is left out with a note.
    """
    if len(datasets) < 2:
        raise ConfigError(f"leave-one-dataset-out needs grid runs of at least 2 datasets, got {len(datasets)}"
                          f"{' (' + ', '.join(datasets) + ')' if datasets else ''}; give the others too")
    if baseline_shots < 1:
        raise ConfigError(f"the baseline's shots must be >= 1, got {baseline_shots}")
    budgets = sorted(set(budgets))
    if not budgets:
        raise ConfigError("no token budgets to evaluate at (the runs record none); give some like 2k,4k,16k "
                          "(`--budgets`)")
    summaries = {name: [s for s in rows if s.effective_tokens is not None] for name, rows in datasets.items()}
    tasks = {name: tasks_from_summaries(name, rows, metric) for name, rows in summaries.items()}
    held_out = []
    for name, rows in summaries.items():
        others = [t for other, ts in tasks.items() if other != name for t in ts]
        try:
            allocation = fit(others, metric=metric, normalize=normalize)
        except ConfigError as e:
            raise ConfigError(f"fitting without {name}: {e}") from None
        i = {t.method: t.i for t in tasks[name]}
        notes = [f"{method} is not a candidate: {name} lacks its base configurations"
                 for method in sorted({s.config.method for s in rows} - set(i))]
        candidates = [s for s in rows if s.config.method in i]
        tokens = {s.config: math.ceil(s.effective_tokens) for s in candidates}  # a mean fits B iff its ceiling does
        by_config = {s.config: s for s in rows}
        correlation = spearman([allocation.predict(s.config, i[s.config.method]) for s in candidates],
                               [s.metric(metric) for s in candidates])
        drag_shots = [s.config.shots for s in rows if s.config.strategy == "drag" and s.config.shots <= baseline_shots]
        shots = max(drag_shots, default=None)
        cells = []
        for budget in budgets:
            if min(tokens.values()) > budget:
                notes.append(f"budget {budget}: no configuration fits (the cheapest is {min(tokens.values())} tokens)")
                continue
            choice = plan(allocation, budget, list(tokens), tokens.__getitem__, i)
            oracle = next(o.best for o in optimal_per_budget(rows, [budget], metric) if o.strategy == "best")
            baseline = _baseline(rows, budget, shots)
            cells.append(HeldOutBudget(
                budget, Scored.of(by_config[choice.config], metric), choice.predicted, choice.considered,
                Scored.of(oracle, metric), None if baseline is None else Scored.of(baseline, metric)))
        held_out.append(HeldOutDataset(name, allocation, i, shots, correlation, tuple(cells), tuple(notes)))
    return LeaveOneOut(metric, normalize, baseline_shots, tuple(held_out))
