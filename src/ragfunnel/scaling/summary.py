"""Summaries of a grid run's rows: each configuration's means, and the paper's optimal performance
per token budget (the best configuration of each strategy whose mean effective context length fits).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ragfunnel.errors import ConfigError
from ragfunnel.scaling.grid import METRICS, STRATEGIES, Config, GridRow, format_tokens

# The configurations each strategy may choose from when its best is taken: RAG may retrieve nothing
# (zero-shot) and DRAG may use no demonstrations (RAG), as in the paper's parameter space.
SEARCH_SPACE = {
    "zero-shot": ("zero-shot",),
    "rag": ("zero-shot", "rag"),
    "drag": ("zero-shot", "rag", "drag"),
    "iterdrag": ("iterdrag",),
}


@dataclass(frozen=True)
class ConfigSummary:
    """A configuration's means over its rows. A failed answer scores 0 (it is a wrong answer)."""

    config: Config
    n: int
    failures: int
    accuracy: float
    em: float
    f1: float
    effective_tokens: float | None  # mean over answered rows; None when every row failed
    max_call_tokens: int  # the largest single call seen
    seconds: float

    def metric(self, name: str) -> float:
        """The mean of metric ``name``: accuracy, em or f1."""
        if name not in METRICS:
            raise ConfigError(f"unknown metric {name!r}; valid metrics: {', '.join(METRICS)}")
        return getattr(self, name)


def summarize(rows: Iterable[GridRow]) -> list[ConfigSummary]:
    """One summary per configuration, in the order the configurations first appear."""
    by_config: dict[Config, list[GridRow]] = {}
    for r in rows:
        by_config.setdefault(r.config, []).append(r)
    out = []
    for config, mine in by_config.items():
        ok = [r for r in mine if r.error is None]
        out.append(ConfigSummary(
            config=config, n=len(mine), failures=len(mine) - len(ok),
            **{m: sum(r.metrics.get(m, 0.0) for r in mine) / len(mine) for m in METRICS},
            effective_tokens=statistics.fmean(r.effective_tokens for r in ok) if ok else None,
            max_call_tokens=max((r.max_call_tokens for r in ok), default=0),
            seconds=statistics.fmean(r.seconds for r in mine),
        ))
    return out


@dataclass(frozen=True)
class Optimum:
    """P*(L_max) of one strategy (or of all of them: ``strategy == "best"``); ``best`` None if nothing fits."""

    budget: int
    strategy: str
    best: ConfigSummary | None


def optimal_per_budget(summaries: Sequence[ConfigSummary], budgets: Iterable[int], metric: str) -> list[Optimum]:
    """The paper's optimal performance: per budget and strategy, the configuration with the best mean
    ``metric`` among those whose mean effective context length fits (ties go to the cheaper one).
    Strategies are those present in ``summaries``, then ``best`` over all of them."""
    present = {s.config.strategy for s in summaries}
    strategies = [s for s in STRATEGIES if s in present]
    out = []
    for budget in sorted(budgets):
        fits = [s for s in summaries if s.effective_tokens is not None and s.effective_tokens <= budget]
        for strategy in [*strategies, "best"]:
            space = STRATEGIES if strategy == "best" else SEARCH_SPACE[strategy]
            mine = [s for s in fits if s.config.strategy in space]
            best = max(mine, key=lambda s: (s.metric(metric), -s.effective_tokens), default=None)
            out.append(Optimum(budget, strategy, best))
    return out


def optimal_table(optima: Sequence[Optimum], metric: str) -> str:
    """The optimal-performance table (the paper's Table 1) as markdown; the chosen metric picks the rows."""
    lines = [f"Optimal performance per budget L_max (configurations chosen by {metric}; "
             "tokens: mean effective context length)", "",
             "| L_max | strategy | k | m | n | tokens | EM | F1 | Acc |",
             "|---|---|---|---|---|---|---|---|---|"]
    for o in optima:
        s = o.best
        name = o.strategy
        if s is None:
            lines.append(f"| {format_tokens(o.budget)} | {name} | - | - | - | - | - | - | - |")
            continue
        k, m, n = s.config.theta
        if o.strategy == "best":
            name = f"**best** ({s.config.strategy})"
        lines.append(f"| {format_tokens(o.budget)} | {name} | {k} | {m} | {n} | {s.effective_tokens:.0f} "
                     f"| {s.em:.3f} | {s.f1:.3f} | {s.accuracy:.3f} |")
    return "\n".join(lines) + "\n"
