"""The files summarising a grid run, written into its directory: the optimal-performance table
(``optimal.md``) and the quality-vs-context plot (``quality_vs_context.png``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ragfunnel.errors import InputError
from ragfunnel.scaling.grid import load_grid
from ragfunnel.scaling.plots import plot_quality_vs_context
from ragfunnel.scaling.summary import optimal_per_budget, optimal_table, summarize

SUMMARY_FILE, SUMMARY_PLOT = "optimal.md", "quality_vs_context.png"


@dataclass(frozen=True)
class SummaryFiles:
    """What :func:`write_summary` wrote: the table's markdown, and where the table and the plot are."""

    table: str
    table_path: Path
    plot_path: Path


def write_summary(run_dir: str | Path, budgets: Sequence[int], metric: str) -> SummaryFiles:
    """Write the optimal-performance table (per budget and strategy, the best configuration by ``metric``)
    and the quality-vs-context plot into ``run_dir``, a directory written by ``ragfunnel scale grid``.

    The table is written first, so it is there even when the plot cannot be drawn (matplotlib, the
    ``[eval]`` extra, missing)."""
    run_dir = Path(run_dir)
    summaries = summarize(load_grid(run_dir).rows)
    if not summaries:
        raise InputError(f"{run_dir} holds no rows yet; run `ragfunnel scale grid` into it first")
    optima = optimal_per_budget(summaries, budgets, metric)
    table = optimal_table(optima, metric)
    table_path = run_dir / SUMMARY_FILE
    table_path.write_text(table, encoding="utf-8")
    plot_path = plot_quality_vs_context(summaries, optima, metric, run_dir / SUMMARY_PLOT)
    return SummaryFiles(table, table_path, plot_path)
