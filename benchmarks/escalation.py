"""Does climbing from an unsupported OP-RAG answer to FB-RAG read new evidence, and does it pay?

Takes a default-path run of ``benchmarks/confidence.py`` (OP-RAG rows of the held-out questions, the calibration
it shipped) and runs the rung ``auto`` climbs to, FB-RAG, on the held-out questions whose OP answer is flagged
unsupported (confidence under the calibration's ``supported_at``). With ``--queries`` it also runs FB-RAG whose
drafts are written as search queries (prompt variant ``queries``) instead of answers. Then ``auto`` is replayed
over every held-out question:

- OP answers; where its answer is unsupported the rung runs. A rung whose final chunks OP already read is skipped
  (it costs its drafts, not an answer), as ``auto`` skips it; the more confident answer is kept;
- quality and mean seconds against OP alone, paired; the evidence the rung added (questions whose evidence OP did
  not read and the rung did).

    .venv/bin/python benchmarks/escalation.py --run benchmarks/results/default_path --queries
"""

from __future__ import annotations

import argparse
import json
import statistics
from datetime import date
from pathlib import Path

from confidence import OPTIONS, _runs, held_out, load_rows, quality
from ragfunnel.confidence.calibration import load_calibration
from ragfunnel.confidence.measures import is_right
from ragfunnel.eval.runner import EvalRow, run_eval
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG
from ragfunnel.llm.registry import model_identity, set_disk_caches
from ragfunnel.methods.fbrag import FBRAG

QUERY_DRAFT_TOKENS = 96  # three short "Search:" lines


class QueryDrafts(FBRAG):
    """FB-RAG whose drafts are search queries ("Search: ..." lines), not rationales and answers."""

    name = "fb-queries"

    def __init__(self, **options):
        super().__init__(**options)
        self.draft_variant = "queries"
        self.sample_max_tokens = QUERY_DRAFT_TOKENS


def _method(name: str, task: str):
    options = {k: v for k, v in OPTIONS.items() if k in ("chunk_words", "budget", "stage1_budget", "samples")}
    return {"fb": FBRAG, "fb-queries": QueryDrafts}[name](task=task, **options)


def unsure(run: Path, supported_at: float, calibration) -> set[tuple[str, str]]:
    """(setting, id) of the held-out OP rows flagged unsupported."""
    return {(s, r.example_id) for s, r in load_rows(run)
            if r.method == "op" and held_out(r.example_id) and calibration.confidence("op", r.signals) < supported_at}


def collect(run: Path, chosen: set[tuple[str, str]], methods: list[str], *, limit: int, context_words: int) -> None:
    set_disk_caches(False)
    settings = sorted({"longbench" if s.startswith("longbench") else s for s, _ in chosen})
    models = {s: model_identity(s) for s in (DEFAULT_LIGHT, DEFAULT_STRONG)}
    for method in methods:
        taken = 0
        for name, examples, task, profile, config in _runs(settings, 1000, context_words):
            mine = [e for e in examples if (name, e.id) in chosen][:max(0, limit - taken)]
            taken += len(mine)
            if mine:
                folder = run / "escalation" / f"{name}-{method.replace('-', '_')}"
                run_eval(mine, {method: _method(method, task)}, folder,
                         metric_profile=profile, config=config | {"options": OPTIONS, "task": task, "models": models,
                                                                  "method": method})


def _positions(row: EvalRow) -> set[int]:
    return {c["position"] for c in row.chunks_used}


def _answer_seconds(row: EvalRow) -> float:
    return sum(s["seconds"] for s in row.trace["stages"] if s["name"] in ("stage3_generate", "confidence"))


def replay(run: Path, rung: str, calibration) -> dict:
    """``auto`` over the held-out questions: OP, and ``rung`` where OP's answer is unsupported."""
    op = {(s, r.example_id): r for s, r in load_rows(run) if r.method == "op" and held_out(r.example_id)}
    climbed = {(s, r.example_id): r for s, r in load_rows(run / "escalation") if r.method == rung}
    scores, op_scores, seconds, op_seconds = [], [], [], []
    counts = {"climbed": 0, "skipped": 0, "kept_rung": 0, "new_evidence": 0, "evidence_lost": 0}
    for key, first in op.items():
        op_scores.append(quality(first))
        op_seconds.append(first.seconds)
        best, spent = first, first.seconds
        other = climbed.get(key)
        if other is not None:
            counts["climbed"] += 1
            if _positions(other) <= _positions(first):
                counts["skipped"] += 1
                spent += other.seconds - _answer_seconds(other)
            else:
                spent += other.seconds
                if calibration.confidence(rung, other.signals) > calibration.confidence("op", first.signals):
                    best = other
                    counts["kept_rung"] += 1
                counts["new_evidence"] += bool(other.evidence_read and first.evidence_read is False)
                counts["evidence_lost"] += bool(first.evidence_read and other.evidence_read is False)
        scores.append(quality(best))
        seconds.append(spent)
    diffs = [a - b for a, b in zip(scores, op_scores, strict=True)]
    rung_rows = list(climbed.values())
    return {"n": len(scores), **counts, "quality": round(100 * statistics.mean(scores), 1),
            "op_quality": round(100 * statistics.mean(op_scores), 1),
            "wins": sum(d > 0 for d in diffs), "losses": sum(d < 0 for d in diffs),
            "mean_seconds": round(statistics.mean(seconds), 2),
            "op_mean_seconds": round(statistics.mean(op_seconds), 2),
            "seconds_ratio": round(statistics.mean(seconds) / statistics.mean(op_seconds), 2),
            "rung_rows": len(rung_rows),
            "rung_right": sum(bool(is_right(r.metrics)) for r in rung_rows),
            "rung_evidence_read": sum(bool(r.evidence_read) for r in rung_rows),
            "op_evidence_read_on_those": sum(bool(op[k].evidence_read) for k in climbed if k in op)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=Path("benchmarks/results/default_path"))
    parser.add_argument("--limit", type=int, default=40, help="unsupported questions the rung runs on, at most")
    parser.add_argument("--context-words", type=int, default=2000)
    parser.add_argument("--queries", action="store_true", help="also run FB-RAG with drafts written as queries")
    parser.add_argument("--analyse-only", action="store_true")
    args = parser.parse_args()
    calibration = load_calibration()
    chosen = unsure(args.run, calibration.supported_at, calibration)
    methods = ["fb", "fb-queries"] if args.queries else ["fb"]
    if not args.analyse_only:
        collect(args.run, chosen, methods, limit=args.limit, context_words=args.context_words)
    result = {"date": str(date.today()), "supported_at": calibration.supported_at, "unsupported_held_out": len(chosen),
              "replay": {m: replay(args.run, m, calibration) for m in methods
                         if (args.run / "escalation").exists()}}
    (args.run / "escalation.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
