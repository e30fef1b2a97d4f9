"""What went wrong with the wrong answers of existing eval runs: each classified by its failure kind, no model.

For a run directory written by ``benchmarks/confidence.py`` (sub-folders such as ``musique-op/rows.jsonl``),
every wrong answer (``is_right`` of its metrics, the report's verdict) gets its kind from
:func:`ragfunnel.eval.failures.failure_kind`: answered an earlier hop, picked the other option, the wrong
yes/no, echoed the question, an answer of the wrong type, other. The questions' intermediate answers are read
again from the shared data the run was made from (MuSiQue's decomposition, HotpotQA's supporting titles), by
the setting names ``benchmarks/confidence.py`` uses, so rows written before eval recorded a kind are judged
too. Counts per run folder and kind, how many of each kind had read their evidence (``evidence_read``), and a
few examples of each go to ``--out``.

    .venv/bin/python benchmarks/failure_kinds.py --run benchmarks/results/default_path
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

from confidence import LONGBENCH, MULTIHOP, SHARED, read_evidence
from ragfunnel.confidence.measures import is_right
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.eval.failures import FAILURE_DEFINITIONS, FAILURE_KINDS, failure_kind, hop_answers
from ragfunnel.eval.runner import load_eval
from ragfunnel.types import Example

EXAMPLES_PER_KIND = 3


def dataset_of(setting: str) -> dict[str, Example]:
    """The examples of a setting of ``benchmarks/confidence.py`` by id (its question file alone: the corpus
    its long contexts were built from adds no intermediate answer)."""
    if setting in MULTIHOP:
        return {e.id: e for e in load_dataset(MULTIHOP[setting][0]).examples}
    longbench = {f"longbench-{path.stem}": path for path in LONGBENCH}
    if setting in longbench:
        return {e.id: e for e in load_dataset(longbench[setting], format="longbench").examples}
    raise SystemExit(f"unknown setting {setting!r}; valid: {', '.join([*MULTIHOP, *longbench])}")


def classify(run: Path) -> dict:
    """Per run folder under ``run``: its rows, the wrong ones, their kinds, evidence read per kind, examples."""
    folders = {}
    for rows_file in sorted(run.glob("*/rows.jsonl")):
        name = rows_file.parent.name
        examples = dataset_of(name.rsplit("-", 1)[0])
        rows = [r for r in load_eval(rows_file.parent).rows if r.error is None and is_right(r.metrics) is not None]
        kinds = {kind: 0 for kind in FAILURE_KINDS}
        read = {kind: 0 for kind in FAILURE_KINDS}
        shown: dict[str, list[dict]] = {kind: [] for kind in FAILURE_KINDS}
        missing = 0
        for row in rows:
            if is_right(row.metrics):
                continue
            example = examples.get(row.example_id)
            if example is None:  # a question no longer in the data file: counted, never guessed at
                missing += 1
                continue
            hops = hop_answers(example)
            kind = failure_kind(example.question, row.answer, example.answers, hops, right=False)
            kinds[kind] += 1
            read[kind] += read_evidence(row) is True
            if len(shown[kind]) < EXAMPLES_PER_KIND:
                shown[kind].append({"id": row.example_id, "question": example.question, "answer": row.answer,
                                    "references": example.answers, "hop_answers": hops})
        folders[name] = {"rows": len(rows), "wrong": sum(kinds.values()) + missing, "kinds": kinds,
                         "evidence_read": read, "not_in_data": missing,
                         "examples": {kind: found for kind, found in shown.items() if found}}
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=Path("benchmarks/results/default_path"),
                        help="a run directory of benchmarks/confidence.py")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/failure_kinds.json"))
    args = parser.parse_args()
    if not SHARED.exists():
        parser.error(f"shared data not found at {SHARED}")
    if not any(args.run.glob("*/rows.jsonl")):
        parser.error(f"{args.run} holds no run folders (*/rows.jsonl); pass a run directory of "
                     "benchmarks/confidence.py")
    folders = classify(args.run)
    totals = {kind: sum(f["kinds"][kind] for f in folders.values()) for kind in FAILURE_KINDS}
    result = {"date": str(date.today()), "run": str(args.run), "definitions": FAILURE_DEFINITIONS,
              "wrong": sum(f["wrong"] for f in folders.values()), "totals": totals, "runs": folders}
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    for name, f in folders.items():
        print(f"{name:32} wrong {f['wrong']:3}  " + "  ".join(f"{k} {v}" for k, v in f["kinds"].items()))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
