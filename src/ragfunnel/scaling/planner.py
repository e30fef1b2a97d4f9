"""Choosing a configuration θ = (k, m, n) with a fitted allocation model (:mod:`ragfunnel.scaling.allocation`).

The planner ranks candidate configurations whose effective context length fits a budget by their
predicted score. Candidates the task never ran get their tokens from the task's per-unit costs
(:class:`TokenCosts`), fitted to the configurations it did run (:func:`token_costs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np

from ragfunnel.errors import ConfigError
from ragfunnel.scaling.grid import (
    DEFAULT_DOCUMENTS,
    DEFAULT_ITERATIONS,
    DEFAULT_SHOTS,
    STRATEGIES,
    Config,
    default_grid,
    within_budget,
)

if TYPE_CHECKING:  # for annotations only: allocation imports this module
    from ragfunnel.scaling.allocation import AllocationFit, Informativeness, Observation

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


