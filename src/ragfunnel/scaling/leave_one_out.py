"""Leave one dataset out (the inference-scaling paper's domain generalisation, Table 3).

Fit the allocation model without a dataset, choose that dataset's configuration per token budget,
and compare the choice's actual score with the best the dataset's grid found (the oracle) and with
a fixed-shot baseline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragfunnel.errors import ConfigError, option
from ragfunnel.scaling.allocation import AllocationFit, Informativeness, fit, tasks_from_summaries
from ragfunnel.scaling.grid import Config, format_tokens
from ragfunnel.scaling.planner import rank
from ragfunnel.scaling.summary import ConfigSummary, optimal_per_budget

BASELINE_SHOTS = 8  # the paper's Table 3 baseline: DRAG with 8 demonstrations, scaled by documents


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
                          f"({option('budgets')})")
    summaries = {name: [s for s in rows if s.effective_tokens is not None] for name, rows in datasets.items()}
    tasks = {name: tasks_from_summaries(name, rows, metric) for name, rows in summaries.items()}
    held_out = []
    for name, rows in summaries.items():
        others = [t for other, ts in tasks.items() if other != name for t in ts]
        try:
            allocation = fit(others, metric=metric, normalize=normalize)
        except ConfigError as e:
            raise ConfigError(f"fitting without {name}: {e.marked()}") from None
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
            choice = rank(allocation, budget, list(tokens), tokens.__getitem__, i)[0]  # the best that fits
            oracle = next(o.best for o in optimal_per_budget(rows, [budget], metric) if o.strategy == "best")
            baseline = _baseline(rows, budget, shots)
            cells.append(HeldOutBudget(
                budget, Scored.of(by_config[choice.config], metric), choice.predicted, choice.considered,
                Scored.of(oracle, metric), None if baseline is None else Scored.of(baseline, metric)))
        held_out.append(HeldOutDataset(name, allocation, i, shots, correlation, tuple(cells), tuple(notes)))
    return LeaveOneOut(metric, normalize, baseline_shots, tuple(held_out))


def format_theta(scored: Scored | None) -> str:
    """A configuration as a table cell: its strategy and θ = (k,m,n), like ``drag (5,4,1)``; ``-`` for none."""
    if scored is None:
        return "-"
    c = scored.config
    return f"{c.strategy} ({c.documents},{c.shots},{c.iterations})"


def leave_one_out_report(result: LeaveOneOut) -> str:
    """The results as text: a markdown table with a row per (held-out dataset, budget) of the baseline's,
    the model's and the oracle's configuration and score, then the means over the cells and each
    dataset's Spearman ρ. The datasets' notes are left to the caller (``HeldOutDataset.notes``)."""
    metric, s = result.metric, result.summary
    lines = [f"Leave one dataset out: {metric}, normalize {result.normalize}; each row's model is fitted on the "
             "other runs, its choice is among the held-out run's configurations\n",
             f"| held out | L_max | baseline θ | {metric} | model's θ | {metric} | oracle θ | {metric} |",
             "|---|---|---|---|---|---|---|---|"]
    for d in result.datasets:
        for b in d.budgets:
            base = "-" if b.baseline is None else f"{b.baseline.metric:.3f}"
            lines.append(f"| {d.dataset} | {format_tokens(b.budget)} | {format_theta(b.baseline)} | {base} | "
                         f"{format_theta(b.chosen)} | {b.chosen.metric:.3f} | {format_theta(b.oracle)} | "
                         f"{b.oracle.metric:.3f} |")
    ratio = "n/a" if s.ratio is None else f"{100 * s.ratio:.1f}%"
    lines.append(f"\nmodel's choice {s.chosen:.3f} = {ratio} of the oracle's {s.oracle:.3f} over {s.cells} "
                 f"(dataset, budget) cells; as good as the oracle in {s.matches}")
    if s.baseline is not None:
        lines.append(f"baseline {s.baseline:.3f} vs the model's {s.chosen_where_baseline:.3f} on the "
                     f"{s.baseline_cells} cells with a baseline")
    lines.append("Spearman ρ of predicted vs actual on the held-out configurations: " + ", ".join(
        f"{d.dataset} {'n/a' if d.rank_correlation is None else f'{d.rank_correlation:+.3f}'}"
        for d in result.datasets))
    return "\n".join(lines)
