"""auto's second read of an answer that cannot fit its question: paired quality and its cost, one run.

The default path (``auto``, balanced: OP-RAG at 1,500 tokens) answers each question, and where its answer fails
the question's check (:mod:`ragfunnel.methods.reask`) asks once more. The first answer and the kept one are
both in the row's trace, so each question is its own pair, answered in the same process.

Only questions the re-read can touch are worth the machine's time: with ``--from-run`` (a run directory of the
default path, such as issue 33's ``benchmarks/results/default_path``), the questions whose recorded answer
failed the check; on every other question the re-read never runs and the answer is the first one. The summary
(``--out``/summary.json) gives token F1 x 100 before and after, the paired difference with its standard
error, the re-reads kept, and their seconds: per re-read, and spread over every question of ``--from-run``
(the change to the default path's mean seconds, with this run's first answers' mean seconds standing for
a question's cost).

    .venv/bin/python benchmarks/reask.py --from-run benchmarks/results/default_path --out benchmarks/results/reask
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from datetime import date
from pathlib import Path

from confidence import _runs, load_rows
from ragfunnel.confidence.answer_check import check_answer
from ragfunnel.eval.runner import EvalRow, load_eval, run_eval, score
from ragfunnel.llm import DEFAULT_STRONG
from ragfunnel.llm.registry import model_identity, set_disk_caches
from ragfunnel.methods import make_method
from ragfunnel.types import Example

OPTIONS = {"budget": 1500}


def chosen(from_run: Path) -> dict[str, set[str]]:
    """Setting -> ids of the questions whose recorded answer fails the check."""
    picked: dict[str, set[str]] = {}
    for setting, row in load_rows(from_run):
        if check_answer(row.question, row.answer) is not None:
            picked.setdefault(setting, set()).add(row.example_id)
    return picked


def collect(out: Path, picked: dict[str, set[str]], n: int) -> dict[str, Example]:
    set_disk_caches(False)
    examples = {}
    models = {DEFAULT_STRONG: model_identity(DEFAULT_STRONG)}
    for name, found, task, profile, config in _runs([s for s in picked if not s.startswith("longbench")], n, 2000):
        mine = [e for e in found if e.id in picked[name]]
        examples |= {e.id: e for e in mine}
        run_eval(mine, {"auto": make_method("auto", task=task, **OPTIONS)}, out / f"{name}-auto",
                 metric_profile=profile, config=config | {"task": task, "models": models, "options": OPTIONS})
    return examples


def reread_of(row: EvalRow) -> tuple[str, float]:
    """The answer before the re-read, and what the re-read cost (0 when it did not run)."""
    stages = row.trace["stages"]
    escalate = stages[-1]["detail"]
    first = next(r["answer"] for r in escalate["rungs"] if r["method"] == escalate["answered_by"])
    names = [s["name"] for s in stages]
    cost = sum(s["seconds"] for s in stages[names.index("reask"):-1]) if "reask" in names else 0.0
    return first, cost


def summarise(out: Path, examples: dict[str, Example], every: int) -> dict:
    pairs = []
    for rows_file in sorted(out.glob("*/rows.jsonl")):
        for row in load_eval(rows_file.parent).rows:
            if row.error is None and row.example_id in examples:
                first, cost = reread_of(row)
                before = score(examples[row.example_id], first)["f1"]
                pairs.append({"id": row.example_id, "question": row.question, "first": first, "kept": row.answer,
                              "f1_before": before, "f1_after": row.metrics["f1"], "reread_seconds": cost,
                              "seconds": row.seconds})
    if not pairs:
        return {}
    diffs = [p["f1_after"] - p["f1_before"] for p in pairs]
    reread = [p for p in pairs if p["reread_seconds"] > 0]
    first_pass = statistics.mean(p["seconds"] - p["reread_seconds"] for p in pairs)
    extra = sum(p["reread_seconds"] for p in pairs)
    return {
        "questions": len(pairs), "reread": len(reread), "changed": sum(p["first"] != p["kept"] for p in pairs),
        "f1_before": round(100 * statistics.mean(p["f1_before"] for p in pairs), 1),
        "f1_after": round(100 * statistics.mean(p["f1_after"] for p in pairs), 1),
        "paired_difference": round(100 * statistics.mean(diffs), 1),
        "standard_error": round(100 * statistics.stdev(diffs) / math.sqrt(len(diffs)), 1) if len(diffs) > 1 else None,
        "better_equal_worse": [sum(d > 0 for d in diffs), sum(d == 0 for d in diffs), sum(d < 0 for d in diffs)],
        "mean_first_pass_seconds": round(first_pass, 1),
        "mean_reread_seconds": round(extra / len(reread), 1) if reread else None,
        "over_every_question": {"questions": every, "f1_change": round(100 * sum(diffs) / every, 2),
                                "seconds_ratio": round((every * first_pass + extra) / (every * first_pass), 3)},
        "pairs": pairs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from-run", type=Path, required=True, help="a default-path run directory to pick from")
    parser.add_argument("--examples", type=int, default=60, help="questions per setting that run held (first N)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/reask"))
    args = parser.parse_args()
    picked = chosen(args.from_run)
    examples = collect(args.out, picked, args.examples)
    every = len(load_rows(args.from_run))
    result = {"date": date.today().isoformat(), "from_run": str(args.from_run),
              "summary": summarise(args.out, examples, every)}
    (args.out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result["summary"].items() if k != "pairs"}, indent=2))


if __name__ == "__main__":
    main()
