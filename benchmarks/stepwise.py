"""Stepwise reading against OP-RAG on long multi-hop contexts: paired quality, seconds side by side, failure kinds.

The first ``--examples`` questions of each setting of ``benchmarks/confidence.py`` (train questions hidden
among their corpus' passages until the context holds 2,000 words), answered in one run by OP-RAG (the
default path's first rung, at its 1,500-token budget) and by ``stepwise`` (self-ask over the context's chunks:
1,000 tokens for the question, 500 more per follow-up, three follow-ups at most), one method after the other
in this process, with the disk caches off so every call runs. Rows go to resumable run directories under
``--out``; the summary (token F1 x 100, paired differences with their standard error, mean seconds and their
ratio, wrong answers by failure kind) to ``--out``/summary.json.

    .venv/bin/python benchmarks/stepwise.py --examples 15 --out benchmarks/results/stepwise
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import Counter
from datetime import date
from pathlib import Path

from confidence import _runs, quality
from ragfunnel.confidence.measures import is_right
from ragfunnel.eval.runner import EvalRow, load_eval, run_eval
from ragfunnel.llm import DEFAULT_STRONG
from ragfunnel.llm.registry import model_identity, set_disk_caches
from ragfunnel.methods import make_method

METHODS = {"op": {"budget": 1500}, "stepwise": {}}


def collect(out: Path, settings: list[str], n: int, worked_examples: bool) -> None:
    set_disk_caches(False)
    runs = _runs(settings, n, 2000)
    models = {DEFAULT_STRONG: model_identity(DEFAULT_STRONG)}
    for method, options in METHODS.items():
        if method == "stepwise":
            options = {**options, "worked_examples": worked_examples}
        for name, examples, task, profile, config in runs:
            run_eval(examples, {method: make_method(method, task=task, **options)}, out / f"{name}-{method}",
                     metric_profile=profile, config=config | {"task": task, "models": models, "options": options})


def summarise(out: Path) -> dict:
    by_setting: dict[str, dict[str, dict[str, EvalRow]]] = {}
    for rows_file in sorted(out.glob("*/rows.jsonl")):
        setting, method = rows_file.parent.name.rsplit("-", 1)
        for row in load_eval(rows_file.parent).rows:
            if row.error is None:
                by_setting.setdefault(setting, {}).setdefault(row.example_id, {})[method] = row
    summary = {}
    every: list[dict[str, EvalRow]] = []
    for setting, questions in [*by_setting.items(), ("all", None)]:
        paired = every if questions is None else [m for m in questions.values() if set(METHODS) <= set(m)]
        if questions is not None:
            every += paired
        if not paired:
            continue
        diffs = [quality(m["stepwise"]) - quality(m["op"]) for m in paired]
        seconds = {k: statistics.mean(m[k].seconds for m in paired) for k in METHODS}
        summary[setting] = {
            "questions": len(paired),
            "f1": {k: round(100 * statistics.mean(quality(m[k]) for m in paired), 1) for k in METHODS},
            "paired_difference": round(100 * statistics.mean(diffs), 1),
            "standard_error": round(100 * statistics.stdev(diffs) / math.sqrt(len(diffs)), 1) if len(diffs) > 1
            else None,
            "better_equal_worse": [sum(d > 0 for d in diffs), sum(d == 0 for d in diffs), sum(d < 0 for d in diffs)],
            "mean_seconds": {k: round(v, 1) for k, v in seconds.items()},
            "seconds_ratio": round(seconds["stepwise"] / seconds["op"], 2),
            "failure_kinds": {k: dict(Counter(m[k].failure for m in paired if not is_right(m[k].metrics)))
                              for k in METHODS},
            "forced_final": sum(any(s.get("detail", {}).get("forced") for s in m["stepwise"].trace.get("stages", []))
                                for m in paired),
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=15, help="questions per setting (first N of each file)")
    parser.add_argument("--settings", default="musique,hotpotqa", help="comma-separated settings of confidence.py")
    parser.add_argument("--no-worked-examples", action="store_true", help="stepwise without its worked examples")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/stepwise"))
    parser.add_argument("--analyse-only", action="store_true")
    args = parser.parse_args()
    if not args.analyse_only:
        collect(args.out, args.settings.split(","), args.examples, not args.no_worked_examples)
    result = {"date": date.today().isoformat(), "examples_per_setting": args.examples,
              "worked_examples": not args.no_worked_examples, "summary": summarise(args.out)}
    (args.out / "summary.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
