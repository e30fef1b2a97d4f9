"""A fitted allocation model as text: its parameters, its goodness of fit and each task's i (what
``ragfunnel scale fit`` prints)."""

from __future__ import annotations

from ragfunnel.scaling.allocation import AllocationFit


def format_r2(value: float | None) -> str:
    """R² to four places, or why there is none: a constant metric leaves no variance to explain."""
    return "n/a (constant metric)" if value is None else f"{value:.4f}"


def fit_report(allocation: AllocationFit) -> str:
    """The fit in lines: points and tasks; a, b and c (and the parameters held at 0); the fitted sigmoid and
    each dataset's mean and sd under ``normalize="dataset"``; R² and MSE in the fit's space and on the
    metric's scale; each task's i."""
    metric, a, b = allocation.metric, allocation.a, allocation.b
    lines = [f"computation allocation model for {metric}, {allocation.n_points} points over "
             f"{len(allocation.tasks)} task(s)",
             f"  a = ({a[0]:.4f}, {a[1]:.4f}, {a[2]:.4f})  b = ({b[0]:.4f}, {b[1]:.4f}, 0)  c = {allocation.c:.4f}"]
    if allocation.fixed:
        lines.append(f"  held at 0, not identifiable from these runs: {', '.join(allocation.fixed)}")
    if allocation.normalize == "dataset":
        lower, upper = allocation.sigmoid
        lines.append(f"  σ(x) = {lower:.4f} + {upper - lower:.4f} / (1 + e^-x), fitted to z-scores of {metric} per "
                     "dataset: " + ", ".join(f"{s.dataset} mean {s.mean:.3f} sd {s.std:.3f}"
                                             for s in allocation.scales))
    space = "logit space" if allocation.normalize == "none" else "σ⁻¹ space"
    lines.append(f"  {space}: R² {format_r2(allocation.r2_logit)}  MSE {allocation.mse_logit:.4f}")
    lines.append(f"  {metric}: R² {format_r2(allocation.r2_metric)}  MSE {allocation.mse_metric:.4f}")
    lines.extend(f"  i of {t.name}: i_doc {t.i.doc:+.3f}  i_shot {t.i.shot:+.3f}" for t in allocation.tasks)
    return "\n".join(lines)
