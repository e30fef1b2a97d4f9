"""``ragfunnel eval`` and ``ragfunnel report``: run methods over a dataset into a resumable run directory and
print each method's means; summarise run directories into tables and plots."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ragfunnel import journal
from ragfunnel.cli.common import known_task, method_options, model_settings, ray_from, ray_options
from ragfunnel.confidence import Abstaining
from ragfunnel.confidence.measures import is_right
from ragfunnel.corpus import load_corpus
from ragfunnel.errors import ConfigError, InputError, RagfunnelError
from ragfunnel.eval.datasets import FORMATS, BadRow, Loaded, load_dataset
from ragfunnel.eval.long_context import lengthen
from ragfunnel.eval.report import LATENCY_RULE, right_note, served_from_cache, timed_rows
from ragfunnel.eval.runner import METRIC_PROFILES, EvalRow, run_eval
from ragfunnel.journal import FAILED_FILE, VERSION_KEY
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG
from ragfunnel.llm.fingerprint import sha256_of_file
from ragfunnel.llm.registry import check_backends, model_identity
from ragfunnel.methods import CONTEXT_METHODS, CORPUS_METHODS, DEFAULT_METHOD, config_of, make_method, options_of
from ragfunnel.methods.config import DraftingConfig
from ragfunnel.types import Example
from ragfunnel.version import __version__

if TYPE_CHECKING:
    from ragfunnel.ray_cluster import RayOptions


@click.command("eval")
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--methods", "method_names", default=f"op,{DEFAULT_METHOD}", show_default=True,
              help=f"Comma-separated methods: {', '.join(CONTEXT_METHODS)}.")
@click.option("--out", "run_dir", required=True, type=click.Path(path_type=Path),
              help="Run directory (made if missing): rows.jsonl grows as pairs finish, failed pairs go to "
                   "failed.jsonl; re-running resumes. One process at a time may write it.")
@click.option("--retry-failed/--no-retry-failed", default=True, show_default=True,
              help="On resume, run the pairs that failed before again (or leave them failed).")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N examples.")
@click.option("--format", "fmt", type=click.Choice(["auto", *FORMATS]), default="auto", show_default=True,
              help="Dataset format.")
@click.option("--on-error", type=click.Choice(["fail", "skip"]), default="fail", show_default=True,
              help="A malformed dataset row stops the run (fail) or is reported and skipped (skip).")
@click.option("--task", callback=known_task, metavar="TASK",
              help="Prompt family and scoring (qa, multihop, summary: ROUGE-L, choice: option accuracy, "
                   "longbench/DATASET) [default: the dataset's; LongBench rows: their dataset's].")
@click.option("--metric-profile", type=click.Choice(list(METRIC_PROFILES)), default="ragfunnel", show_default=True,
              help="Scoring: ragfunnel (by task: F1/EM/contains, ROUGE-L, accuracy), longbench (exactly LongBench's "
                   "metrics.py for each row's dataset), hotpotqa (the official F1/EM: yes/no answers that disagree "
                   "score 0).")
@click.option("--context-files-anywhere", is_flag=True,
              help="Let rows' context_file name files outside the dataset's folder (refused by default: a "
                   "downloaded dataset must not make the run read, or send to a model server, other files).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Pairs run at once (helps with server backends).")
@click.option("--corpus", type=click.Path(path_type=Path),
              help="Passage corpus whose passages pad each example's context (with --context-words).")
@click.option("--context-words", type=click.IntRange(min=1),
              help="Build long contexts: hide each example's own passages among --corpus passages until "
                   "the context holds this many words (fixed shuffle per --seed and example).")
@ray_options("Run the (example, method) pairs on Ray workers")
@method_options
def eval_command(dataset: Path, method_names: str, run_dir: Path, retry_failed: bool, limit: int | None, fmt: str,
                 on_error: str, task: str | None, metric_profile: str, context_files_anywhere: bool, workers: int,
                 corpus: Path | None, context_words: int | None, **given: Any) -> None:
    """Run methods over DATASET, one JSONL row per (example, method), resumable."""
    model_settings(given)
    ray = ray_from(given)
    names = _checked_names(method_names, ray=ray, workers=workers, corpus=corpus, context_words=context_words)
    journal.check_free(run_dir)  # before the slow setup: a second writer stops here
    loaded = load_dataset(dataset, format=fmt, on_error=on_error, limit=limit,
                          context_files_anywhere=context_files_anywhere)
    task, examples = _examples(loaded, dataset, task, corpus=corpus, context_words=context_words,
                               seed=given.get("seed"))
    options = {k: v for k, v in given.items() if v is not None}
    # Each method gets the options it takes; the run records them, so a report knows what each ran with.
    models = {k: options[k] for k in ("light", "strong") if k in options}
    received = {name: {"task": task, **models, **{k: v for k, v in options.items() if k in options_of(name)}}
                for name in names}
    methods = {name: make_method(name, **received[name]) for name in names}
    if options.get("abstain") is not None:
        methods = {name: Abstaining(m, options["abstain"]) for name, m in methods.items()}
    specs = [options.get("strong", DEFAULT_STRONG)]
    if any(issubclass(config_of(name), DraftingConfig) for name in names):
        specs.append(options.get("light", DEFAULT_LIGHT))
    check_backends(specs)  # a server that is down stops the run here, before any row
    config = _run_config(dataset, fmt=fmt, task=task, options=options, received=received, specs=specs,
                         corpus=corpus, context_words=context_words)
    result = run_eval(examples, methods, run_dir, config=config, workers=workers, ray=ray,
                      retry_failed=retry_failed, metric_profile=metric_profile)
    _print_outcome(result.rows, names, loaded.errors, run_dir)


def _checked_names(method_names: str, *, ray: RayOptions | None, workers: int, corpus: Path | None,
                   context_words: int | None) -> list[str]:
    """The methods ``--methods`` names, once the options that contradict each other are refused."""
    if ray is not None and workers > 1:
        raise ConfigError("--workers runs pairs in threads of this process, --ray on Ray workers; pass one of them")
    names = [m.strip() for m in method_names.split(",") if m.strip()]
    wrong = [m for m in names if m not in CONTEXT_METHODS]
    if wrong or not names:
        why = (f"{wrong[0]} answers from a corpus index, eval from each example's own context"
               if wrong and wrong[0] in CORPUS_METHODS else f"unknown method {', '.join(wrong) or '(none)'}")
        raise ConfigError(f"{why}; valid methods: {', '.join(CONTEXT_METHODS)}")
    if (corpus is None) != (context_words is None):
        raise ConfigError("--corpus and --context-words go together: pass both to build long contexts, or neither")
    return names


def _examples(loaded: Loaded, dataset: Path, task: str | None, *, corpus: Path | None, context_words: int | None,
              seed: int | None) -> tuple[str, list[Example]]:
    """The task the run is prompted and scored as, and the examples to run (lengthened with ``corpus``'s
    passages when given), each set to that task."""
    if not loaded.examples:
        raise InputError(f"{dataset} yielded no usable examples; see the skipped rows above")
    examples = loaded.examples
    if corpus is not None:
        pool = load_corpus(corpus)
        examples = [lengthen(e, pool, target_words=context_words, seed=seed or 0) for e in examples]
    tasks = sorted({e.task for e in loaded.examples})
    if task is None and len(tasks) > 1:
        if any(t.startswith("longbench/") for t in tasks):  # each dataset has its own prompt, limit and metric
            raise ConfigError(f"{dataset} holds rows of several LongBench datasets ({', '.join(tasks)}); "
                              "split it into one file per dataset and evaluate each")
        raise ConfigError(f"{dataset} mixes tasks ({', '.join(tasks)}); pick one with --task")
    task = task or tasks[0]
    return task, [e if e.task == task else replace(e, task=task) for e in examples]  # scored as they are prompted


def _run_config(dataset: Path, *, fmt: str, task: str, options: dict[str, Any], received: dict[str, dict[str, Any]],
                specs: list[str], corpus: Path | None, context_words: int | None) -> dict[str, Any]:
    """What the run is, recorded in its directory: a resume with anything different is refused."""
    config = {"dataset": str(dataset.resolve()), "dataset_sha256": sha256_of_file(dataset), "format": fmt,
              "task": task, "options": options,
              VERSION_KEY: __version__, "method_options": received,
              "models": {spec: model_identity(spec) for spec in specs}}
    if corpus is not None:
        config |= {"corpus": str(corpus.resolve()), "corpus_sha256": sha256_of_file(corpus),
                   "context_words": context_words}
    return config


def _print_outcome(rows: list[EvalRow], names: list[str], skipped: list[BadRow], run_dir: Path) -> None:
    """Each method's means on stdout, the skipped dataset rows on stderr; an error when every pair failed."""
    click.echo(_eval_table(rows, names), err=False)
    if skipped:
        click.echo(f"{len(skipped)} dataset row(s) skipped; first: {skipped[0]}", err=True)
    failed = [r for r in rows if r.error is not None]
    if failed and len(failed) == len(rows):
        raise RagfunnelError(f"every pair failed ({len(failed)}, kept in {run_dir / FAILED_FILE}); first: "
                             f"{failed[0].error}")


def _eval_table(rows: list[EvalRow], names: list[str]) -> str:
    """One line of means per method, then what "right" and the seconds count, as `ragfunnel report` says it."""
    lines = []
    for name in names:
        mine = [r for r in rows if r.method == name]
        ok = [r for r in mine if r.error is None]
        metrics = sorted({k for r in ok for k in r.metrics})
        means = "  ".join(f"{k} {sum(r.metrics.get(k, 0.0) for r in ok) / len(ok):.3f}" for k in metrics) if ok else "-"
        verdicts = [v for r in ok if (v := is_right(r.metrics)) is not None]
        right = f"  right {sum(verdicts)}/{len(verdicts)}" if verdicts else ""
        timed = timed_rows(ok)
        secs = sum(r.seconds for r in timed) / len(timed) if timed else 0.0
        cached = sum(served_from_cache(r) for r in ok)
        left_out = (f" ({cached} cached rows left out)" if len(timed) < len(ok)
                    else f" (all {cached} rows cached: lookups)" if cached else "")
        known = [r.evidence_read for r in ok if r.evidence_read is not None]
        evidence = f"  evidence read {sum(known)}/{len(known)}" if known else ""
        lines.append(f"{name:<11} n={len(mine):<4} failed={len(mine) - len(ok):<3} {means}{right}  "
                     f"mean {secs:.1f}s{left_out}{evidence}")
    ok = [r for r in rows if r.method in names and r.error is None]
    lines.append(right_note((r.metrics for r in ok), "right"))
    if any(served_from_cache(r) for r in ok):
        lines.append(f"Mean seconds are {LATENCY_RULE}.")
    return "\n".join(lines)


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Where report.md, report.html and the PNGs go [default: the first RUN_DIR].")
@click.option("--metric", help="Quality axis of the plots: f1, em, accuracy, rouge_l or longbench "
                                "[default: longbench, f1, rouge_l or accuracy, whichever the rows have].")
def report(run_dirs: tuple[Path, ...], out_dir: Path | None, metric: str | None) -> None:
    """Summarise one or more `ragfunnel eval` run directories into tables and plots."""
    from ragfunnel.eval.report import write_report

    for path in write_report(list(run_dirs), out_dir or run_dirs[0], metric=metric):
        click.echo(str(path))
