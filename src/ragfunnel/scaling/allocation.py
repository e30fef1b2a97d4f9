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

ε = 0.01 lets k = 0 and m = 0 in (the paper's shift). Before the logit P is clipped to
[δ, 1 − δ] with δ = 0.01: a configuration scoring 0 or 1 has an infinite logit, and δ caps it at
±4.6, about where differences stop being measurable on the few hundred questions a grid can afford.

Parameters the data cannot tell apart are held at 0 and reported as ``fixed``: a₃ when every point
has the same n (log(n+ε) is then a constant that c absorbs), b₁ (b₂) when every task has the same
i_doc (i_shot) — then b⊙i is a multiple of a, as with a single task. The paper z-normalises each
dataset's metric and fits its own sigmoid; here P stays a proportion and σ is the standard
logistic, so predictions are metrics in [0, 1].
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragfunnel.errors import ConfigError, InputError
from ragfunnel.scaling.grid import Config, ConfigSummary, within_budget

log = logging.getLogger(__name__)

EPSILON = 0.01
DELTA = 0.01
PARAMETERS = ("a1", "a2", "a3", "b1", "b2", "c")  # b3 is 0 by the model's definition, not a parameter
BASE_THETAS = ((0, 0, 1), (1, 0, 1), (0, 1, 1))  # nothing, one document, one demonstration
FORMAT = "ragfunnel.allocation-fit/1"


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
    """The observations of one method on one task, with that task's i."""

    name: str
    method: str
    i: Informativeness
    observations: tuple[Observation, ...]

    def __post_init__(self) -> None:
        foreign = [o.config.label for o in self.observations if o.config.method != self.method]
        if foreign:
            raise ConfigError(f"task {self.name!r} is for method {self.method} but holds {', '.join(foreign)}")


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
    """One task per method in a grid run (each with its own i); configurations that never answered are left out."""
    summaries = list(summaries)
    tasks = []
    for method in ("drag", "iterdrag"):
        obs = [Observation(s.config, s.metric(metric), s.effective_tokens) for s in summaries
               if s.config.method == method and s.effective_tokens is not None]
        if obs:
            label = f"{name} [{method}]"
            tasks.append(Task(label, method, informativeness(obs, method, task=label), tuple(obs)))
    if not tasks:
        raise InputError(f"{name} has no answered configuration to fit; run `ragfunnel scale grid` first")
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
class AllocationFit:
    """Fitted a, b (b₃ = 0), c with their goodness of fit, and the tasks they were fitted on."""

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

    @property
    def n_points(self) -> int:
        return sum(len(t.observations) for t in self.tasks)

    def predict_logit(self, config: Config, i: Informativeness) -> float:
        weights = np.array([*self.a, self.b[0], self.b[1], self.c])
        return float(_features(config, i, self.epsilon) @ weights)

    def predict(self, config: Config, i: Informativeness) -> float:
        """The predicted mean metric of ``config`` on a task with informativeness ``i``."""
        return float(_sigmoid(self.predict_logit(config, i)))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "metric": self.metric, "epsilon": self.epsilon, "delta": self.delta,
            "a": list(self.a), "b": list(self.b), "c": self.c, "fixed": list(self.fixed),
            "r2_logit": self.r2_logit, "mse_logit": self.mse_logit,
            "r2_metric": self.r2_metric, "mse_metric": self.mse_metric, "n_points": self.n_points,
            "tasks": [{"name": t.name, "method": t.method, "i_doc": t.i.doc, "i_shot": t.i.shot,
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
                                   o["metric"], o["effective_tokens"]) for o in t["observations"]))
            for t in data["tasks"])
        return cls(data["metric"], tuple(data["a"]), tuple(data["b"]), data["c"], tuple(data["fixed"]),
                   data["r2_logit"], data["mse_logit"], data["r2_metric"], data["mse_metric"], tasks,
                   data["epsilon"], data["delta"])


def _unidentifiable(tasks: Sequence[Task]) -> tuple[str, ...]:
    fixed = []
    if len({o.config.iterations for t in tasks for o in t.observations}) < 2:
        fixed.append("a3")
    if len({t.i.doc for t in tasks}) < 2:
        fixed.append("b1")
    if len({t.i.shot for t in tasks}) < 2:
        fixed.append("b2")
    return tuple(fixed)


def fit(tasks: Sequence[Task], *, metric: str, delta: float = DELTA, epsilon: float = EPSILON) -> AllocationFit:
    """Least-squares fit of a, b and c shared by ``tasks``, each task with its own i."""
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
    y = _logit(actual, delta)
    if np.linalg.matrix_rank(design[:, free]) < len(free):
        raise ConfigError(f"the configurations do not pin down {', '.join(PARAMETERS[j] for j in free)}: too few "
                          "distinct values of k, m or n; run more configurations")
    weights = np.zeros(len(PARAMETERS))
    weights[free] = np.linalg.lstsq(design[:, free], y, rcond=None)[0]
    if fixed:
        log.info("holding %s at 0: the data cannot identify them", ", ".join(fixed))
    predicted = design @ weights
    predicted_metric = np.asarray(_sigmoid(predicted))
    return AllocationFit(
        metric=metric, a=tuple(float(w) for w in weights[:3]), b=(float(weights[3]), float(weights[4]), 0.0),
        c=float(weights[5]), fixed=fixed,
        r2_logit=_r2(y, predicted), mse_logit=float(np.mean((y - predicted) ** 2)),
        r2_metric=_r2(actual, predicted_metric), mse_metric=float(np.mean((actual - predicted_metric) ** 2)),
        tasks=tuple(tasks), epsilon=epsilon, delta=delta,
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
        if data.get("format") != FORMAT:
            raise KeyError("format")
        return AllocationFit.from_json(data)
    except FileNotFoundError:
        raise InputError(f"{path} does not exist; write a fit with `ragfunnel scale fit RUNDIR --out {path}`") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory; pass the fit file in it that `ragfunnel scale fit` wrote "
                         "(allocation.json by default)") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise InputError(f"{path} is not an allocation fit ({type(e).__name__}: {e}); "
                         "write one with `ragfunnel scale fit RUNDIR`") from None


@dataclass(frozen=True)
class PlanChoice:
    """The configuration predicted best under a budget."""

    config: Config
    predicted: float  # the model's predicted metric
    estimated_tokens: int
    budget: int
    considered: int  # candidates that fit the budget


def plan(
    allocation: AllocationFit,
    budget: int,
    candidates: Iterable[Config],
    estimate: Callable[[Config], int],
    i: Mapping[str, Informativeness],
) -> PlanChoice:
    """The candidate with the highest predicted metric among those whose estimated effective context
    length fits ``budget`` (ties go to the cheaper one). ``i`` maps each candidate method
    ("drag", "iterdrag") to the task's informativeness for it."""
    candidates = list(dict.fromkeys(candidates))
    lacking = sorted({c.method for c in candidates} - set(i))
    if lacking:
        raise ConfigError(f"no informativeness i for {', '.join(lacking)}; run its base configurations on the task, "
                          "or leave its candidates out")
    costs = {c: estimate(c) for c in candidates}
    fitting = within_budget(candidates, budget, costs.__getitem__)
    best = max(fitting, key=lambda c: (allocation.predict(c, i[c.method]), -costs[c]))
    return PlanChoice(best, allocation.predict(best, i[best.method]), costs[best], budget, len(fitting))
