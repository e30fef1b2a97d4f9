"""``ragfunnel calibrate RUN_DIR... --out FILE``: fit the confidence model on eval runs."""

from __future__ import annotations

from pathlib import Path

import click

from ragfunnel import journal
from ragfunnel.cli.common import Command
from ragfunnel.confidence.calibration import DEFAULT_MODEL, ENV_VAR, CalibrationFile, short_fingerprint
from ragfunnel.confidence.fitting import MIN_ROWS, Row, fit_calibration
from ragfunnel.confidence.measures import auroc, expected_calibration_error, is_right
from ragfunnel.errors import InputError
from ragfunnel.eval.runner import EvalRow, load_eval
from ragfunnel.types import Stage


@click.command(cls=Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), metavar="FILE",
              help="The calibration file to write (JSON).")
def calibrate(run_dirs: tuple[Path, ...], out: Path) -> None:
    """Fit the confidence model on `ragfunnel eval` runs and write it to FILE.

    An answer's confidence is the probability that it is right, computed from the signals its method
    records (token log-probabilities, agreement of the drafts, the model's own judgement ...). This fits
    that mapping on the RUN_DIRs' rows whose answers are known right or wrong (F1, LongBench score or
    choice accuracy of at least 0.5): one logistic model per method with at least 30 such rows, both
    right and wrong, and a default one over every row for the other methods. It prints, per method, the
    rows, the share right, how well the confidences separate right from wrong (AUROC) and how close they
    are to the share right (ECE) on those rows, and the AUROC on rows each model was not fitted on
    (5-fold cross-validation; `auto` escalates on a confidence only when this reaches 0.6).

    Fit on runs of the models you will answer with: FILE records their weights' fingerprints, and
    answering with other weights warns that the confidences may be off. Answers use FILE when given
    `--calibration FILE`, or when the environment variable RAGFUNNEL_CALIBRATION names it; otherwise they
    use the calibration shipped with ragfunnel.
    """
    rows: list[Row] = []
    read = []
    seen: dict[str, set[str]] = {"strong": set(), "light": set()}
    for run_dir in run_dirs:
        answered = [r for r in load_eval(run_dir).rows if r.error is None]
        read.append(f"{run_dir} ({len(answered)} rows)")
        for r in answered:
            rows.append((r.method, r.signals, is_right(r.metrics)))
            for role, fingerprint in _weights(r).items():
                seen[role].add(fingerprint)
    fingerprints = {role: _one(role, found) for role, found in seen.items() if found}
    cal = fit_calibration(rows, fingerprints=fingerprints, fitted_on=", ".join(read))
    journal.out_file(out)
    for line in _fit_lines(cal, rows):
        click.echo(line)
    cal.save(out)
    click.echo(f"wrote {out}; answers use it with --calibration {out} or {ENV_VAR}={out}")


def _weights(row: EvalRow) -> dict[str, str]:
    """The weights fingerprints of a row's models by role: the drafting stage's is the light model's, the
    answering stage's (the last other stage that called a model) the strong model's: FB-RAG's light model drafts
    in :attr:`Stage.FORWARD`, and every other model call is the strong one's."""
    found = {}
    for stage in row.trace.get("stages", []):
        detail = stage.get("detail")
        weights = detail.get("weights") if isinstance(detail, dict) else None
        if isinstance(weights, str):
            found["light" if stage["name"] == Stage.FORWARD else "strong"] = weights
    return found


def _one(role: str, seen: set[str]) -> str:
    if len(seen) > 1:
        shown = ", ".join(sorted(short_fingerprint(f) for f in seen))
        raise InputError(f"the runs' {role} answers come from {len(seen)} different model weights ({shown}); "
                         f"calibrate on runs of one {role} model, the one answers will use")
    return next(iter(seen))


def _fit_lines(cal: CalibrationFile, rows: list[Row]) -> list[str]:
    """Per method: its rows, share right, the AUROC and ECE of the model that scores it on the rows it was
    fitted on, and that model's cross-validated AUROC."""
    usable = [r for r in rows if r[1] and r[2] is not None]
    lines = [f"{'method':<14} {'rows':>5} {'right':>6} {'AUROC':>6} {'ECE':>6} {'held-out AUROC':>14}  model"]
    for method in dict.fromkeys(r[0] for r in usable):
        name = cal.model_for(method) or DEFAULT_MODEL
        note = "its own" if name != DEFAULT_MODEL else f"default (fewer than {MIN_ROWS} rows, or all right or wrong)"
        lines.append(_stats_line(method, cal, name, [r for r in usable if r[0] == method], note))
    lines.append(_stats_line("(all)", cal, DEFAULT_MODEL, usable, "default, over every method"))
    return lines


def _stats_line(label: str, cal: CalibrationFile, name: str, rows: list[Row], note: str) -> str:
    probs = [cal.models[name].predict(signals) for _, signals, _ in rows]
    right = [bool(r[2]) for r in rows]
    separation = f"{auroc(probs, right):6.3f}" if 0 < sum(right) < len(right) else f"{'-':>6}"
    ece = expected_calibration_error(probs, right)
    held = cal.held_out.get(name, {}).get("auroc")
    held_out = f"{'-':>14}" if held is None else f"{held:14.3f}"
    return f"{label:<14} {len(rows):>5} {sum(right) / len(right):6.2f} {separation} {ece:6.3f} {held_out}  {note}"
