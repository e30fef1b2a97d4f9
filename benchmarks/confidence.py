"""Does confidence tell right answers from wrong ones, and does ``auto`` spend well by it?

Collects eval rows (answers, every confidence signal, seconds) for OP-RAG, FB-RAG and LC with the
bundled models on shared data, then fits the calibration on one half of the questions and reports on
the other half (split by a hash of the question id, so the halves hold different documents):

- each signal's AUROC alone, per method (right = token F1 >= 0.5, LongBench's own score >= 0.5);
- the calibrated confidence's AUROC and ECE, and the quality of the 50% most confident answers;
- ``auto`` replayed from the rows at each ``prefer`` (its rungs are these methods on these questions,
  so the replay is exact up to timing noise) against the best single method, and its seconds against OP's;
- FB-RAG against OP-RAG, paired; what computing the confidence cost, as a share of the answer's time.

Settings (each a resumable run directory under ``--out``; rows are written as they finish):

``hotpotqa``, ``musique``,
``hotpotqa_amor``           train questions hidden among their corpus' passages until the context
                            holds ``--context-words`` words (multi-hop, task ``multihop``)
``longbench``               LongBench dev documents (qasper, multifieldqa_en, narrativeqa), their own
                            prompts and LongBench's scoring; LC only on documents of at most 6,000 words

    .venv/bin/python benchmarks/confidence.py --examples 40 --methods op --out benchmarks/results/confidence
    .venv/bin/python benchmarks/confidence.py --analyse-only --ship --out benchmarks/results/confidence

``--ship`` writes a calibration into the package (src/ragfunnel/confidence/calibration.json): the features the
fit half chose, refitted on every row (both halves), with the statistics of a 5-fold cross-validation over them.
``--also DIR`` adds another run's rows to both halves; ``--extra-fit DIR`` only its fit-half rows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import statistics
from datetime import date
from pathlib import Path

from ragfunnel.confidence.answer_check import check_answer
from ragfunnel.confidence.calibration import SHIPPED
from ragfunnel.confidence.fitting import fit_calibration
from ragfunnel.confidence.measures import auroc, coverage_curve, expected_calibration_error, is_right
from ragfunnel.confidence.signals import EXPECTED_DIRECTION
from ragfunnel.corpus import load_corpus
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.eval.long_context import lengthen
from ragfunnel.eval.runner import EvalRow, load_eval, run_eval
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, resolve
from ragfunnel.llm.registry import model_identity, set_disk_caches
from ragfunnel.methods import make_method, options_of
from ragfunnel.methods.auto import CLIMBS
from ragfunnel.text.chunking import CHUNK_WORDS, count_words

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
MULTIHOP = {
    "hotpotqa": (SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train.json",
                 SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train_corpus.json"),
    "musique": (SHARED / "musique_train_hipporag" / "musique_train.json",
                SHARED / "musique_train_hipporag" / "musique_train_corpus.json"),
    "hotpotqa_amor": (SHARED / "hotpotqa_train_amor" / "hotpotqa_train100_amor.jsonl",
                      SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train_corpus.json"),
}
LONGBENCH = [SHARED / "longbench_minilongbench_dev" / f for f in ("qasper.jsonl", "multifieldqa_en.jsonl",
                                                                 "narrativeqa.jsonl")]
OPTIONS = {"chunk_words": CHUNK_WORDS, "budget": 1500, "stage1_budget": 3000, "samples": 5}
LC_MAX_WORDS = 6000  # LC over a longer document takes minutes per question on two cores
MIN_SIGNAL_SEPARATION = 0.05  # |AUROC - 0.5| a signal needs alone on the fit half to be "informative"
METHODS = ("op", "fb", "lc")


def held_out(example_id: str) -> bool:
    """The report half: a fixed hash of the id, so every method's row of a question is on the same side."""
    return hashlib.sha256(example_id.encode()).digest()[0] % 2 == 1


def _methods(names: list[str], task: str) -> dict:
    return {m: make_method(m, task=task, **{k: v for k, v in OPTIONS.items() if k in options_of(m)}) for m in names}


def _runs(settings: list[str], n: int, context_words: int) -> list[tuple[str, list, str, str, dict]]:
    """(run name, examples, task, metric profile, config) for each setting's dataset file."""
    runs = []
    for name in settings:
        if name in MULTIHOP:
            questions, corpus = MULTIHOP[name]
            pool = load_corpus(corpus)
            examples = [lengthen(e, pool, target_words=context_words)
                        for e in load_dataset(questions, limit=n).examples]
            runs.append((name, examples, "multihop", "ragfunnel",
                         {"dataset": str(questions), "corpus": str(corpus), "context_words": context_words}))
        elif name == "longbench":
            for path in LONGBENCH:
                examples = load_dataset(path, format="longbench", limit=n).examples
                runs.append((f"longbench-{path.stem}", examples, examples[0].task, "longbench",
                             {"dataset": str(path)}))
        else:
            raise SystemExit(f"unknown setting {name!r}; valid: {', '.join([*MULTIHOP, 'longbench'])}")
    return runs


def collect(out: Path, *, settings: list[str], methods: list[str], n: int, context_words: int) -> None:
    """Run each method on the first ``n`` questions of every setting, skipping rows already written; one
    method at a time over every setting, so a stop leaves the cheaper methods' rows complete."""
    set_disk_caches(False)  # every call runs: the seconds (and the confidence's share of them) are real
    runs = _runs(settings, n, context_words)
    models = {s: model_identity(s) for s in (DEFAULT_LIGHT, DEFAULT_STRONG)}
    for method in methods:
        for name, examples, task, profile, config in runs:
            chosen = [e for e in examples if method != "lc" or count_words(e.context or "") <= LC_MAX_WORDS]
            if chosen:
                run_eval(chosen, _methods([method], task), out / f"{name}-{method}", metric_profile=profile,
                         config=config | {"options": OPTIONS, "task": task, "models": models, "method": method})


def load_rows(out: Path) -> list[tuple[str, EvalRow]]:
    """(setting, row) for every finished row with a verdict under ``out``; a row written before ``answer_check``
    was a signal gets it, computed from its question and answer exactly as ``assess`` computes it now."""
    rows = []
    for rows_file in sorted(out.glob("*/rows.jsonl")):
        for row in load_eval(rows_file.parent).rows:
            if row.error is None and is_right(row.metrics) is not None:
                if row.signals and "answer_check" not in row.signals:
                    row.signals["answer_check"] = float(check_answer(row.question, row.answer) is None)
                rows.append((rows_file.parent.name.rsplit("-", 1)[0], row))
    return rows


def quality(row: EvalRow) -> float:
    metrics = row.metrics
    return float(metrics.get("f1", metrics.get("longbench", metrics.get("accuracy", 0.0))))


def signal_aurocs(rows: list[EvalRow]) -> dict[str, dict[str, float]]:
    """Each signal's AUROC alone (right vs wrong) over the rows that have it; below 0.5 means higher is worse."""
    out = {}
    names = sorted({k for r in rows for k in r.signals})
    for name in names:
        have = [r for r in rows if name in r.signals]
        labels = [bool(is_right(r.metrics)) for r in have]
        if len(set(labels)) == 2:
            out[name] = {"auroc": round(auroc([r.signals[name] for r in have], labels), 3), "n": len(have)}
    return out


def replay_auto(by_question: dict[str, dict[str, EvalRow]], confidence, prefer: str,
                threshold: float | None = None) -> dict[str, float]:
    """``auto`` at ``prefer`` replayed from each question's rows: OP first, the next rung while the confidence
    is under ``threshold`` (None: never climbs), the most confident answer kept;
    seconds add up over the rungs run."""
    ladder = {"speed": ["op"], "balanced": ["op", "fb"], "quality": ["op", "fb", "lc"]}[prefer]
    scores, seconds, climbed = [], [], 0
    for rows in by_question.values():
        ran, best = [], None
        for method in ladder:
            if method not in rows:
                continue
            row = rows[method]
            ran.append(row)
            c = confidence(row)
            if best is None or c > confidence(best):
                best = row
            if threshold is None or c >= threshold:
                break
        climbed += len(ran) > 1
        scores.append(quality(best))
        seconds.append(sum(r.seconds for r in ran))
    return {"quality": round(100 * statistics.mean(scores), 1), "mean_seconds": round(statistics.mean(seconds), 2),
            "climbed": climbed, "n": len(scores)}


def _paired(rows: list[tuple[str, EvalRow]]) -> dict[str, dict[str, EvalRow]]:
    """Each question's rows by method, for the questions both OP-RAG and FB-RAG answered."""
    questions: dict[str, dict[str, EvalRow]] = {}
    for setting, r in rows:
        questions.setdefault(f"{setting}/{r.example_id}", {})[r.method] = r
    return {q: by_method for q, by_method in questions.items() if "op" in by_method and "fb" in by_method}


def stable_signals(rows: list[EvalRow]) -> set[str]:
    """The signals that alone separate right from wrong, in the direction expected of them, by at least
    :data:`MIN_SIGNAL_SEPARATION` on both halves of ``rows`` (split by a second hash of the question id)."""
    halves = [[r for r in rows if hashlib.sha256(f"half:{r.example_id}".encode()).digest()[0] % 2 == k]
              for k in (0, 1)]
    kept = None
    for half in halves:
        here = {name for name, v in signal_aurocs(half).items()
                if EXPECTED_DIRECTION.get(name, 1) * (v["auroc"] - 0.5) >= MIN_SIGNAL_SEPARATION}
        kept = here if kept is None else kept & here
    return kept or set()


def supported_report(conf: list[float], rows: list[EvalRow], supported_at: float) -> dict:
    """How the ``supported`` flag splits ``rows``: the share flagged, and how often each side is right."""
    flagged = [r for c, r in zip(conf, rows, strict=True) if c < supported_at]
    kept = [r for c, r in zip(conf, rows, strict=True) if c >= supported_at]
    share = lambda rs: round(sum(bool(is_right(r.metrics)) for r in rs) / len(rs), 3) if rs else None  # noqa: E731
    wrong = sum(not is_right(r.metrics) for r in rows)
    return {"supported_at": supported_at, "flagged": len(flagged), "n": len(rows),
            "right_when_flagged": share(flagged), "right_when_supported": share(kept),
            "wrong_flagged": round(sum(not is_right(r.metrics) for r in flagged) / wrong, 3) if wrong else None}


def read_evidence(row: EvalRow) -> bool | None:
    """The row's ``evidence_read``; for a row written before eval recorded it, the same verdict from its
    ``answer_rank`` (was that chunk read?) and ``gold_recall`` (were all supporting passages touched?)."""
    if row.evidence_read is not None or not row.ranking:
        return row.evidence_read
    used = {c["position"] for c in row.chunks_used}
    if row.answer_rank is not None and row.ranking[row.answer_rank - 1] in used:
        return True
    if row.gold_recall is not None:
        return row.gold_recall >= 1.0
    return False if row.answer_rank is not None else None


def by_threshold(conf: list[float], rows: list[EvalRow]) -> dict[str, dict]:
    """For a user choosing ``--abstain``: at each confidence threshold, the share of answers kept (at or above
    it) and their quality and share right."""
    out = {}
    for t in (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6):
        kept = [r for c, r in zip(conf, rows, strict=True) if c >= t]
        if kept:
            out[f"{t:.2f}"] = {"answered": round(len(kept) / len(rows), 3),
                               "quality": round(100 * statistics.mean(quality(r) for r in kept), 1),
                               "right": round(sum(bool(is_right(r.metrics)) for r in kept) / len(kept), 3)}
    return out


def evidence_report(rows: list[EvalRow]) -> dict:
    """Evidence recall at the budget, and the wrong answers split by whether the evidence was read."""
    verdicts = [(r, read_evidence(r)) for r in rows]
    known = [(r, v) for r, v in verdicts if v is not None]
    wrong = [(r, v) for r, v in known if not is_right(r.metrics)]
    return {"evidence_recall": round(100 * sum(v for _, v in known) / len(known), 1) if known else None,
            "n": len(known), "wrong": len(wrong), "wrong_evidence_not_read": sum(not v for _, v in wrong),
            "wrong_evidence_read": sum(bool(v) for _, v in wrong)}


def paired_with(baseline: Path, rows: list[tuple[str, EvalRow]], method: str = "op") -> dict:
    """This run's ``method`` rows against ``baseline``'s on the same questions (same setting and id)."""
    before = {(s, r.example_id): r for s, r in load_rows(baseline) if r.method == method}
    pairs = [(before[(s, r.example_id)], r) for s, r in rows if r.method == method and (s, r.example_id) in before]
    if not pairs:
        return {}
    diffs = [quality(new) - quality(old) for old, new in pairs]
    return {"n": len(pairs), "before": round(100 * statistics.mean(quality(o) for o, _ in pairs), 1),
            "after": round(100 * statistics.mean(quality(n) for _, n in pairs), 1),
            "wins": sum(d > 0 for d in diffs), "ties": sum(d == 0 for d in diffs), "losses": sum(d < 0 for d in diffs),
            "mean_difference": round(100 * statistics.mean(diffs), 1),
            "standard_error": (round(100 * statistics.stdev(diffs) / math.sqrt(len(diffs)), 1)
                               if len(diffs) > 1 else None),
            "seconds_before": round(statistics.mean(o.seconds for o, _ in pairs), 2),
            "seconds_after": round(statistics.mean(n.seconds for _, n in pairs), 2),
            "evidence_before": evidence_report([o for o, _ in pairs]),
            "evidence_after": evidence_report([n for _, n in pairs])}


def analyse(out: Path, *, ship: bool, extra_fit: list[Path] = (), also: list[Path] = (),
            baseline: Path | None = None) -> dict:
    rows = load_rows(out) + [pair for d in also for pair in load_rows(d)]
    fit = [(s, r) for s, r in rows if not held_out(r.example_id)]
    report = [(s, r) for s, r in rows if held_out(r.example_id)]
    # Rows of other runs join the fit half only for questions on its side of the split: a held-out question
    # is never fitted on, whichever method answered it.
    fit += [(s, r) for d in extra_fit for s, r in load_rows(d) if not held_out(r.example_id)]
    weights = {role: resolve(spec).fingerprint for role, spec in (("strong", DEFAULT_STRONG), ("light", DEFAULT_LIGHT))}
    fitted_on = (f"benchmarks/confidence.py, fit half: {len(fit)} rows of the bundled models on HotpotQA (HippoRAG's "
                 f"and AMOR's), MuSiQue and LongBench dev ({date.today()})")
    # Two candidate feature sets, chosen between on the fit half alone (cross-validated AUROC of the default
    # model): every signal, or only those that alone separate right from wrong on both halves of the fit half.
    alone = signal_aurocs([r for _, r in fit])
    informative = stable_signals([r for _, r in fit])
    candidates = {}
    for label, keep in (("all signals", None), ("informative signals", informative)):
        candidates[label] = fit_calibration(
            [(r.method, {k: v for k, v in r.signals.items() if keep is None or k in keep}, is_right(r.metrics))
             for _, r in fit], fingerprints=weights, fitted_on=f"{fitted_on}; {label}")
    chosen = max(candidates, key=lambda label: candidates[label].held_out.get("default", {}).get("auroc", 0.0))
    calibration = candidates[chosen]
    result: dict = {"date": str(date.today()), "machine": platform.machine(), "rows": len(rows),
                    "fit_rows": len(fit), "report_rows": len(report), "fit_half_signals": alone,
                    "features": {"chosen": chosen, "informative": sorted(informative),
                                 "cross_validated_auroc": {label: c.held_out.get("default", {}).get("auroc")
                                                           for label, c in candidates.items()}},
                    "methods": {}}
    for method in METHODS:
        mine = [r for _, r in report if r.method == method]
        if len({bool(is_right(r.metrics)) for r in mine}) < 2:
            continue
        labels = [bool(is_right(r.metrics)) for r in mine]
        conf = [calibration.confidence(method, r.signals) for r in mine]
        curve = coverage_curve(conf, [quality(r) for r in mine])
        half = curve[math.ceil(len(curve) / 2) - 1][1]
        spent = [sum(s["seconds"] for s in r.trace["stages"] if s["name"] == "confidence") / r.seconds
                 for r in mine if r.seconds > 0]
        result["methods"][method] = {
            "n": len(mine), "right": sum(labels), "quality": round(100 * statistics.mean(quality(r) for r in mine), 1),
            "auroc": round(auroc(conf, labels), 3), "ece": round(expected_calibration_error(conf, labels), 3),
            "quality_top_half": round(100 * half, 1), "quality_all": round(100 * curve[-1][1], 1),
            "confidence_cost_share": round(statistics.median(spent), 4) if spent else None,
            "signals": signal_aurocs(mine),
            "median_seconds": round(statistics.median(r.seconds for r in mine), 2),
            "mean_seconds": round(statistics.mean(r.seconds for r in mine), 2),
            "top_half_ratio": round(half / curve[-1][1], 2) if curve[-1][1] else None,
            "supported": supported_report(conf, mine, calibration.supported_at),
            "risk_coverage": [[round(curve[i][0], 2), round(100 * curve[i][1], 1)]
                              for i in sorted({max(0, round(t / 10 * len(curve)) - 1) for t in range(1, 11)})],
            "by_threshold": by_threshold(conf, mine),
            "evidence": evidence_report(mine),
        }
    conf_of = lambda row: calibration.confidence(row.method, row.signals)  # noqa: E731
    # Thresholds are chosen on the fit half (confidence in-sample there) and only reported on the other.
    fit_both = _paired(fit)
    if fit_both:
        result["fit_half_balanced_by_threshold"] = {str(t): replay_auto(fit_both, conf_of, "balanced", t)
                                                    for t in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)}
    both = _paired(report)
    if both:
        diffs = [quality(rows["fb"]) - quality(rows["op"]) for rows in both.values()]
        result["fb_vs_op"] = {"n": len(diffs), "wins": sum(d > 0 for d in diffs), "losses": sum(d < 0 for d in diffs),
                              "mean_difference": round(100 * statistics.mean(diffs), 1)}
        result["auto"] = {prefer: replay_auto(both, conf_of, prefer, calibration.supported_at if climbs else None)
                          for prefer, climbs in CLIMBS.items()}
        result["single"] = {m: round(100 * statistics.mean(quality(rows[m]) for rows in both.values()), 1)
                            for m in ("op", "fb")}
        result["op_mean_seconds"] = round(statistics.mean(rows["op"].seconds for rows in both.values()), 2)
    if baseline is not None:
        result["against_baseline"] = paired_with(baseline, rows)
    result["evidence_all_rows"] = {m: evidence_report([r for _, r in rows if r.method == m]) for m in METHODS
                                   if any(r.method == m for _, r in rows)}
    pooled = [r for _, r in report if r.signals]
    conf = [calibration.confidence(r.method, r.signals) for r in pooled]
    labels = [bool(is_right(r.metrics)) for r in pooled]
    result["every_method"] = {"n": len(pooled), "right": sum(labels), "auroc": round(auroc(conf, labels), 3),
                              "ece": round(expected_calibration_error(conf, labels), 3),
                              "supported": supported_report(conf, pooled, calibration.supported_at)}
    if ship:
        # The halves chose the features and measured them; what ships is refitted on every row with those
        # features, its held_out statistics those of a 5-fold cross-validation over every row.
        keep = None if chosen == "all signals" else informative
        every = [r for _, r in fit + report]
        shipped = fit_calibration(
            [(r.method, {k: v for k, v in r.signals.items() if keep is None or k in keep}, is_right(r.metrics))
             for r in every], fingerprints=weights,
            fitted_on=(f"benchmarks/confidence.py, every row: {len(every)} rows of the bundled models on HotpotQA "
                       f"(HippoRAG's and AMOR's), MuSiQue and LongBench dev ({date.today()}); {chosen}"))
        shipped.save(SHIPPED)
        result["shipped"] = {"rows": len(every), "supported_at": shipped.supported_at,
                             "cross_validated": shipped.held_out.get("default")}
    (out / "confidence.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=50, help="questions per setting (first N of each file)")
    parser.add_argument("--settings", default="hotpotqa,musique,longbench", help="comma-separated settings")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated, of " + ", ".join(METHODS))
    parser.add_argument("--context-words", type=int, default=2000, help="words per multi-hop context")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/confidence"))
    parser.add_argument("--analyse-only", action="store_true", help="only analyse the rows already written")
    parser.add_argument("--ship", action="store_true", help="write the fitted calibration into the package")
    parser.add_argument("--extra-fit", type=Path, action="append", default=[],
                        help="another run directory whose fit-half rows join the fit (repeatable)")
    parser.add_argument("--also", type=Path, action="append", default=[],
                        help="another run directory whose rows join both halves (repeatable)")
    parser.add_argument("--baseline", type=Path, help="a run directory whose OP rows this run's are paired with")
    parser.add_argument("--budget", type=int, default=OPTIONS["budget"], help="the answering model's budget in tokens")
    args = parser.parse_args()
    if not SHARED.exists():
        parser.error(f"shared data not found at {SHARED}")
    OPTIONS["budget"] = args.budget
    if not args.analyse_only:
        collect(args.out, settings=[s.strip() for s in args.settings.split(",") if s.strip()],
                methods=[m.strip() for m in args.methods.split(",") if m.strip()], n=args.examples,
                context_words=args.context_words)
    print(json.dumps(analyse(args.out, ship=args.ship, extra_fit=args.extra_fit, also=args.also,
                                     baseline=args.baseline), indent=2))


if __name__ == "__main__":
    main()
