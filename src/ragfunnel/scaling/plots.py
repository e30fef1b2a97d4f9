"""Scaling plots (PNG): quality vs effective context length, and the allocation model's predicted vs actual."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragfunnel.errors import MissingExtra
from ragfunnel.scaling.allocation import AllocationFit
from ragfunnel.scaling.grid import STRATEGIES
from ragfunnel.scaling.summary import ConfigSummary, Optimum

COLOURS = dict(zip(STRATEGIES, ("tab:grey", "tab:green", "tab:blue", "tab:orange"), strict=True))


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display on servers and in CI
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra("matplotlib", "eval") from None
    return plt


def plot_quality_vs_context(summaries: Sequence[ConfigSummary], optima: Sequence[Optimum], metric: str,
                            path: str | Path) -> Path:
    """Every configuration's mean ``metric`` against its mean effective context length (log x), coloured
    by strategy, with the per-budget optima and a line fitted through them (the paper's Figures 1 and 4)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    answered = [s for s in summaries if s.effective_tokens is not None]
    for strategy in STRATEGIES:
        mine = [s for s in answered if s.config.strategy == strategy]
        if mine:
            ax.scatter([s.effective_tokens for s in mine], [s.metric(metric) for s in mine], s=18, alpha=0.7,
                       color=COLOURS[strategy], label=strategy)
    best = {o.best.config: o.best for o in optima if o.strategy == "best" and o.best is not None}.values()
    if best:
        xs = np.array([s.effective_tokens for s in best])
        ys = np.array([s.metric(metric) for s in best])
        ax.scatter(xs, ys, s=60, facecolors="none", edgecolors="red", linewidths=1.5, label="optimum per budget")
        if len(set(xs)) >= 2:  # the paper's dashed line: optimal quality linear in log(effective context)
            slope, intercept = np.polyfit(np.log10(xs), ys, 1)
            line = np.geomspace(xs.min(), xs.max(), 50)
            ax.plot(line, intercept + slope * np.log10(line), "--", color="grey",
                    label=f"fit: {slope:+.3f} per 10x tokens")
    ax.set_xscale("log")
    ax.set_xlabel("effective context length (mean LLM input tokens per answer)")
    ax.set_ylabel(metric)
    ax.set_title("Quality vs effective context length")
    ax.legend(fontsize=8)
    return _save(fig, plt, path)


def plot_predicted_vs_actual(allocation: AllocationFit, path: str | Path) -> Path:
    """Each fitted point's actual metric against the model's prediction, with y = x and R² in the title.

    Under ``normalize="dataset"`` a prediction is a z-score, put back on the metric's scale with its
    dataset's mean and standard deviation (:meth:`AllocationFit.predict_metric`), as R² and MSE are."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 5))
    lowest, highest = 0.0, 1.0
    for strategy in STRATEGIES:
        points = [(allocation.predict_metric(o.config, t.i, t.dataset), o.metric) for t in allocation.tasks
                  for o in t.observations if o.config.strategy == strategy]
        if points:
            predicted, actual = zip(*points, strict=True)
            ax.scatter(predicted, actual, s=18, alpha=0.7, color=COLOURS[strategy], label=strategy)
            lowest, highest = min(lowest, *predicted), max(highest, *predicted)  # a z-score put back may leave [0, 1]
    ax.plot([0, 1], [0, 1], "--", color="grey", label="y = x")
    r2 = "n/a" if allocation.r2_metric is None else f"{allocation.r2_metric:.3f}"
    ax.set_title(f"Allocation model: R² = {r2}, MSE = {allocation.mse_metric:.4f} ({allocation.metric})")
    scale = "" if allocation.normalize == "none" else " (z-score × its dataset's sd + mean)"
    ax.set_xlabel(f"predicted {allocation.metric}{scale}")
    ax.set_ylabel(f"actual {allocation.metric}")
    ax.set_xlim(lowest, highest)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    return _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # the image holds whatever is drawn outside the axes
    plt.close(fig)
    return path
