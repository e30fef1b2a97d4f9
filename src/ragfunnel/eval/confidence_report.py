"""The confidence part of a report: how well each method's answer confidences tell right from wrong.

Per (dataset, method) whose rows carry a confidence: AUROC (does a right answer score above a wrong
one?), ECE (is a confidence of 0.8 right 80% of the time?) and the quality of the half of the
questions it is most confident on against all of them. ``confidence_reliability.png`` plots share
right against confidence per bin; ``quality_vs_answered.png`` the quality of answering only the
most confident share of the questions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragfunnel.confidence.measures import (
    ReliabilityBin,
    auroc,
    coverage_curve,
    expected_calibration_error,
    is_right,
    reliability_bins,
)

RELIABILITY_PNG, COVERAGE_PNG = "confidence_reliability.png", "quality_vs_answered.png"


@dataclass(frozen=True)
class ConfidenceSummary:
    dataset: str
    method: str
    metric: str  # the quality measure of the coverage columns and curve
    n: int  # rows with a confidence
    judged: int  # of them, rows whose answer is known right or wrong
    share_right: float | None
    auroc: float | None  # None unless the judged rows hold right and wrong answers
    ece: float | None
    quality_all: float
    quality_top_half: float  # over the ceil(n / 2) most confident rows
    reliability: list[ReliabilityBin]
    coverage: list[tuple[float, float]]  # (share answered, mean quality), most confident first

    @property
    def label(self) -> str:
        return f"{self.method} ({self.dataset}, n={self.n})"


def summarise_confidence(dataset: str, method: str, metric: str,
                         rows: Sequence[tuple[float, dict[str, float]]]) -> ConfidenceSummary | None:
    """The confidence measures over ``(confidence, metrics)`` rows; None when there are none."""
    if not rows:
        return None
    confidences = [c for c, _ in rows]
    coverage = coverage_curve(confidences, [m.get(metric, 0.0) for _, m in rows])
    judged = [(c, verdict) for c, m in rows if (verdict := is_right(m)) is not None]
    probs, right = [c for c, _ in judged], [v for _, v in judged]
    both = 0 < sum(right) < len(right)
    return ConfidenceSummary(
        dataset=dataset, method=method, metric=metric, n=len(rows), judged=len(judged),
        share_right=sum(right) / len(right) if judged else None,
        auroc=auroc(probs, right) if both else None,
        ece=expected_calibration_error(probs, right) if judged else None,
        quality_all=coverage[-1][1], quality_top_half=coverage[math.ceil(len(coverage) / 2) - 1][1],
        reliability=reliability_bins(probs, right) if judged else [], coverage=coverage,
    )


def confidence_table(summaries: list[ConfidenceSummary]) -> tuple[list[str], list[list[str]]]:
    header = ["dataset", "method", "n with confidence", "judged", "share right", "AUROC", "ECE", "quality metric",
              "quality, 50% most confident", "quality, all"]
    body = [[s.dataset, s.method, str(s.n), str(s.judged), _number(s.share_right, 2), _number(s.auroc, 3),
             _number(s.ece, 3), s.metric, f"{s.quality_top_half:.3f}", f"{s.quality_all:.3f}"] for s in summaries]
    return header, body


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def confidence_plots(plt: Any, summaries: list[ConfidenceSummary], out_dir: Path, *, right: str) -> list[str]:
    """The reliability diagram and the quality-vs-share-answered curve; the names of those written.

    ``right`` is the verdict the reliability diagram counts, in short (``f1 ≥ 0.5``), for its axis label."""
    made = []
    judged = [s for s in summaries if s.reliability]
    if judged:
        fig, ax = plt.subplots(figsize=(6, 4.5))
        ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="calibrated")
        for s in judged:
            ax.plot([b.mean_confidence for b in s.reliability], [b.share_right for b in s.reliability], marker="o",
                    label=f"{s.label}, ECE {s.ece:.3f}")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("mean confidence in the bin (bins of width 0.1)")
        ax.set_ylabel(f"share of its answers that are right ({right})")
        ax.set_title("Reliability of the answers' confidence")
        ax.legend(fontsize=8)
        save_figure(plt, fig, out_dir / RELIABILITY_PNG)
        made.append(RELIABILITY_PNG)
    if summaries:
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for s in summaries:
            ax.plot([p[0] for p in s.coverage], [p[1] for p in s.coverage], label=f"{s.label}, {s.metric}")
        ax.set_xlim(0, 1.02)
        ax.set_xlabel("share of questions answered (the most confident first)")
        ax.set_ylabel("mean quality of the answered")
        ax.set_title("Quality vs share answered")
        ax.legend(fontsize=8)
        save_figure(plt, fig, out_dir / COVERAGE_PNG)
        made.append(COVERAGE_PNG)
    return made


def save_figure(plt: Any, fig: Any, path: Path) -> None:
    """Write ``fig`` as a PNG whole: the image grows to hold every legend and label drawn beside the axes."""
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
