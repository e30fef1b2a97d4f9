"""Leave-one-dataset-out test of the computation allocation model on existing grid runs (the paper's Table 3).

No model is loaded: the script reads the rows that ``benchmarks/scaling.py`` (or ``ragfunnel scale grid``)
wrote, one run directory per dataset, and for every metric and both normalisations ("none": the metric
with the standard logistic; "dataset": the paper's per-dataset z-scores with a fitted sigmoid) calls
:func:`ragfunnel.scaling.allocation.leave_one_dataset_out`: for each dataset, fit a, b, c on the others,
take its i from its own base configurations, and per budget pick among the configurations it ran the one
predicted best within the budget; its actual score is compared with the best configuration the dataset ran
within the budget (oracle) and with DRAG at a fixed number of shots scaled by documents (the paper's 8-shot
baseline; the largest m <= 8 a run has). Every question of each run counts (the scaling benchmark's
fit / held-back split is within a dataset; here whole datasets are held out).

    .venv/bin/python benchmarks/allocation_loo.py    # writes benchmarks/results/allocation_loo.json

Runs in about a second.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from ragfunnel.errors import RagfunnelError
from ragfunnel.scaling.allocation import NORMALIZATIONS
from ragfunnel.scaling.grid import METRICS, format_tokens, load_grid, parse_budgets
from ragfunnel.scaling.leave_one_out import BASELINE_SHOTS, LeaveOneOut, leave_one_dataset_out
from ragfunnel.scaling.summary import summarize

RUNS = Path("benchmarks/results/scaling")


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def theta(s: dict[str, Any] | None) -> str:
    return "-" if s is None else f"{s['strategy']} ({s['k']},{s['m']},{s['n']}) {s['metric']:.3f}"


def table(result: LeaveOneOut) -> str:
    data = result.to_json()
    lines = [f"{result.metric}, normalize {result.normalize}",
             "| held out | L_max | baseline | model's choice | oracle |", "|---|---|---|---|---|"]
    for d in data["datasets"]:
        for b in d["budgets"]:
            lines.append(f"| {d['dataset']} | {format_tokens(b['budget'])} | {theta(b['baseline'])} | "
                         f"{theta(b['chosen'])} | {theta(b['oracle'])} |")
    s = result.summary
    ratio = "n/a" if s.ratio is None else f"{100 * s.ratio:.1f}%"
    baseline = ("no baseline" if s.baseline is None else
                f"baseline {s.baseline:.3f} vs choice {s.chosen_where_baseline:.3f} on {s.baseline_cells} cells")
    lines.append(f"choice {s.chosen:.3f} = {ratio} of oracle {s.oracle:.3f} ({s.matches}/{s.cells} cells match); "
                 f"{baseline}; Spearman " + ", ".join(f"{d['dataset']} {d['rank_correlation']:+.3f}"
                                         if d["rank_correlation"] is not None else f"{d['dataset']} n/a"
                                         for d in data["datasets"]))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, nargs="+", default=[RUNS / "hotpotqa", RUNS / "musique"],
                        help="grid run directories, one per dataset (named by the directory)")
    parser.add_argument("--budgets", type=parse_budgets, default=parse_budgets("1k,2k,4k,8k,16k"),
                        help="token budgets L_max (default 1k,2k,4k,8k,16k, the scaling benchmark's)")
    parser.add_argument("--metrics", default="accuracy,f1", help=f"comma-separated, of {', '.join(METRICS)}")
    parser.add_argument("--baseline-shots", type=int, default=BASELINE_SHOTS)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/allocation_loo.json"))
    args = parser.parse_args()
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    if not metrics or set(metrics) - set(METRICS):
        parser.error(f"--metrics takes some of {', '.join(METRICS)}; got {args.metrics!r}")
    started = time.perf_counter()
    try:
        datasets = {d.name: summarize(load_grid(d).rows) for d in args.runs}
        if len(datasets) < len(args.runs):
            parser.error("two run directories share a name; name each dataset's directory differently")
        results = [leave_one_dataset_out(datasets, args.budgets, metric=metric, normalize=normalize,
                                         baseline_shots=args.baseline_shots)
                   for metric in metrics for normalize in NORMALIZATIONS]
    except RagfunnelError as e:
        sys.exit(f"error: {e}")
    for r in results:
        print(table(r), end="\n\n")
    payload = {
        "benchmark": "benchmarks/allocation_loo.py", "date": date.today().isoformat(), "machine": machine(),
        "command": " ".join([".venv/bin/python", *sys.argv]), "runs": [str(d) for d in args.runs],
        "questions": {name: max((s.n for s in rows), default=0) for name, rows in datasets.items()},
        "budgets": args.budgets, "seconds": round(time.perf_counter() - started, 3),
        "results": [r.to_json() for r in results],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
