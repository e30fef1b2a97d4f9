"""``ragfunnel scale grid|summary|fit|loo|plan`` (``ragfunnel plan`` too): inference scaling with DRAG and IterDRAG."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from ragfunnel.cli.common import (
    Command,
    Group,
    config_option,
    model_settings,
    ray_from,
    ray_options,
    remote_embedder_option,
    timeout_option,
)
from ragfunnel.errors import ConfigError, InputError, RagfunnelError
from ragfunnel.eval.datasets import FORMATS
from ragfunnel.journal import FAILED_FILE, VERSION_KEY, check_free, out_file
from ragfunnel.llm import DEFAULT_STRONG
from ragfunnel.methods.config import IterDragConfig
from ragfunnel.scaling.allocation import NORMALIZATIONS, fit, load_fit, save_fit, tasks_from_summaries
from ragfunnel.scaling.fit_report import fit_report
from ragfunnel.scaling.grid import (
    DEFAULT_DOCUMENTS,
    DEFAULT_ITERATIONS,
    DEFAULT_SHOTS,
    METRICS,
    STRATEGIES,
    default_grid,
    format_tokens,
    load_grid,
    parse_budget,
    parse_budgets,
    run_grid,
    within_budget,
)
from ragfunnel.scaling.leave_one_out import BASELINE_SHOTS, leave_one_dataset_out, leave_one_out_report
from ragfunnel.scaling.plots import plot_predicted_vs_actual
from ragfunnel.scaling.sizing import GridMethods, first_call_sizes
from ragfunnel.scaling.summary import summarize
from ragfunnel.scaling.summary_files import write_summary
from ragfunnel.scaling.task_plan import plan_json, plan_report, task_candidates
from ragfunnel.version import __version__

FIT_FILE = "allocation.json"


def _ints(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{option} takes comma-separated whole numbers like 0,1,2,5; got {text!r}") from None
    if not values:
        raise ConfigError(f"{option} is empty; give comma-separated whole numbers like 0,1,2,5")
    return values


# The grid's axes: θ = (k documents, m demonstrations, n iterations).
GRID_AXES = (("documents", "k", "documents retrieved per question", DEFAULT_DOCUMENTS),
             ("shots", "m", "demonstrations before the question", DEFAULT_SHOTS),
             ("iterations", "n", "IterDRAG's most retrieve-and-answer steps", DEFAULT_ITERATIONS))


def grid_axes_options(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--documents``, ``--shots`` and ``--iterations``: comma-separated values of k, m and n (the grid's by
    default), each with ``help`` naming its ``{letter}`` and ``{meaning}``."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for name, letter, meaning, values in reversed(GRID_AXES):
            command = click.option(f"--{name}", default=",".join(map(str, values)), show_default=True,
                                   help=help.format(letter=letter, meaning=meaning))(command)
        return command

    return decorate


def _metric_option(command: Callable) -> Callable:
    return click.option("--metric", type=click.Choice(METRICS), default="accuracy", show_default=True,
                        help="accuracy: a reference answer appears in the answer; em: exact match; f1: token F1.")(
        command)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
def scale() -> None:
    """Inference scaling for corpus RAG: run DRAG/IterDRAG over a grid of θ = (k documents, m demonstrations,
    n iterations), tabulate the best quality per token budget, fit the computation allocation model, test it
    leave-one-dataset-out, and plan with it."""


@scale.command(short_help="Run DRAG/IterDRAG over the configurations within the budgets (resumable).")
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path),
              help="Corpus index to retrieve from (`ragfunnel index`).")
@click.option("--out", "run_dir", required=True, type=click.Path(path_type=Path),
              help="Run directory: rows.jsonl grows as answers finish; re-running with the same options resumes.")
@click.option("--budgets", default="2k,4k,8k,16k", show_default=True,
              help="Token budgets L_max (k = 1,000). The grid runs every configuration whose first call fits the "
                   "largest; the summary reports the best per budget.")
@click.option("--strategies", default=",".join(STRATEGIES), show_default=True,
              help="Comma-separated strategies to run: zero-shot, rag, drag, iterdrag.")
@grid_axes_options("Values of {letter}, {meaning}.")
@click.option("--demonstrations", "demonstrations_path", type=click.Path(path_type=Path),
              help="Demonstrations file (needed when some m > 0).")
@click.option("--model", default=DEFAULT_STRONG, show_default=True, metavar="SPEC",
              help="Answering model: bundled:NAME, gguf:PATH, openai:URL#MODEL or openai:URL1,URL2#MODEL.")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N questions.")
@click.option("--format", "fmt", type=click.Choice(["auto", *FORMATS]), default="auto", show_default=True,
              help="Dataset format.")
@click.option("--task", type=click.Choice(["qa", "multihop"]), help="Prompt family [default: the dataset's].")
@click.option("--keep-cache", is_flag=True,
              help="Keep the model's prompt cache between answers: the demonstrations, the same for every "
                   "question, are read once per configuration (much faster with many shots; seconds then "
                   "depend on what ran before).")
@click.option("--no-cache", is_flag=True,
              help="Bypass the on-disk caches (LLM calls, kept document states): every call runs the model, "
                   "nothing is stored.")
@timeout_option
@click.option("--retry-failed/--no-retry-failed", default=True, show_default=True,
              help="On resume, answer the pairs that failed before again (or leave them failed).")
@_metric_option
@ray_options("Run the (question, configuration) pairs on Ray workers")
@remote_embedder_option
def grid(dataset: Path, index_dir: Path, run_dir: Path, budgets: str, strategies: str, documents: str, shots: str,
         iterations: str, demonstrations_path: Path | None, model: str, limit: int | None, fmt: str,
         task: str | None, keep_cache: bool, retry_failed: bool, metric: str, remote_embedder: str | None,
         **given: Any) -> None:
    """Answer DATASET's questions under every configuration within the budgets, one row per
    (question, configuration); then write the optimal-performance table and plot into --out."""
    from ragfunnel.eval.datasets import load_dataset
    from ragfunnel.llm.registry import check_backends, model_identity, resolve

    model_settings(given)
    ray = ray_from(given)
    check_free(run_dir)  # before the slow setup: a second writer stops here
    limits = parse_budgets(budgets)
    configs = default_grid([s.strip() for s in strategies.split(",") if s.strip()],
                           documents=_ints(documents, "--documents"), shots=_ints(shots, "--shots"),
                           iterations=_ints(iterations, "--iterations"))
    examples = load_dataset(dataset, format=fmt, limit=limit).examples
    if not examples:
        raise InputError(f"{dataset} holds no questions")
    tasks = sorted({e.task for e in examples})
    task = task or tasks[0]
    check_backends([model])  # a server that is down stops the run here, before any row
    methods = GridMethods.open(index_dir, model, demonstrations_path, task, remote_embedder=remote_embedder)
    sizes = first_call_sizes(configs, [e.question for e in examples[:3]], limits[-1], methods.build, resolve(model))
    for budget in limits:  # each budget must admit something, or its table row would be empty
        within_budget(sizes, budget, sizes.__getitem__)
    chosen = within_budget(sizes, limits[-1], sizes.__getitem__)
    click.echo(f"{len(chosen)} configurations fit {format_tokens(limits[-1])} tokens per call; "
               f"{len(examples)} questions", err=True)
    meta = {"dataset": str(dataset.resolve()), "format": fmt, "index": str(index_dir.resolve()), "model": model,
            "demonstrations": str(demonstrations_path.resolve()) if demonstrations_path else None, "task": task,
            "limit": limit, "budgets": limits, "strategies": strategies, "documents": documents, "shots": shots,
            "iterations": iterations, "models": {model: model_identity(model)}, VERSION_KEY: __version__}
    result = run_grid(examples, chosen, methods, run_dir, config_meta=meta, cold_caches=not keep_cache,
                      retry_failed=retry_failed, ray=ray)
    failed = [r for r in result.rows if r.error is not None]
    click.echo(f"{result.written} answers written, {len(result.rows)} in {run_dir}, {len(failed)} failed", err=True)
    if failed and len(failed) == len(result.rows):
        raise RagfunnelError(f"every answer failed ({len(failed)}, kept in {run_dir / FAILED_FILE}); first: "
                             f"{failed[0].error}")
    _print_summary(run_dir, limits, metric)


def _print_summary(run_dir: Path, budgets: Sequence[int], metric: str) -> None:
    written = write_summary(run_dir, budgets, metric)
    click.echo(written.table)
    click.echo(f"wrote {written.table_path} and {written.plot_path}", err=True)


@scale.command(short_help="Make DRAG or IterDRAG demonstrations from training questions.")
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path),
              help="Corpus index to retrieve each demonstration's documents from.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Demonstrations file (JSON Lines): each is added as it is made, for questions not tried "
                   "before; re-running resumes, and nothing in the file is ever dropped.")
@click.option("--strategy", type=click.Choice(["drag", "iterdrag"]), default="drag", show_default=True,
              help="drag: question, answer and retrieved documents; iterdrag: self-ask chains the model writes, "
                   "kept only when the final answer holds a reference answer.")
@config_option(IterDragConfig, "documents")
@config_option(IterDragConfig, "iterations")
@click.option("--model", default=DEFAULT_STRONG, show_default=True, metavar="SPEC",
              help="iterdrag: the model that writes the chains.")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N questions.")
@timeout_option
@remote_embedder_option
def demos(dataset: Path, index_dir: Path, out: Path, strategy: str, documents: int, iterations: int, model: str,
          limit: int | None, remote_embedder: str | None, **given: Any) -> None:
    """Write demonstrations for `ragfunnel scale grid` and `ragfunnel ask --method drag|iterdrag`."""
    from ragfunnel.corpus.index import CorpusIndex
    from ragfunnel.eval.datasets import load_dataset
    from ragfunnel.scaling.demonstrations import drag_attempt, extend_demonstrations, generate_iterdrag_demonstrations

    model_settings(given)
    out = out_file(out)
    examples = load_dataset(dataset, limit=limit).examples
    index = CorpusIndex(index_dir, remote_embedder=remote_embedder)
    if strategy == "drag":
        made = extend_demonstrations(examples, out, drag_attempt(index, documents), desc="DRAG demonstrations")
    else:
        from ragfunnel.llm.registry import check_backends

        check_backends([model])
        made = generate_iterdrag_demonstrations(examples, index, model, documents, iterations, out=out)
    click.echo(f"{out}: {len(made)} {strategy} demonstrations (tried {len(examples)} questions; "
               f"the log of every question tried is {out.name}.log.jsonl)")


@scale.command(short_help="Write the optimal-performance table and quality-vs-context plot of a grid run.")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--budgets", help="Token budgets L_max, like 2k,4k,16k [default: the grid's --budgets].")
@_metric_option
def summary(run_dir: Path, budgets: str | None, metric: str) -> None:
    """Write the optimal-performance table (optimal.md: the best configuration per budget and strategy)
    and quality_vs_context.png into RUN_DIR, a directory written by `ragfunnel scale grid`."""
    run = load_grid(run_dir)
    if budgets is None and not run.config.get("budgets"):
        raise ConfigError(f"{run_dir} records no budgets; pass --budgets like 2k,4k,16k")
    _print_summary(run_dir, parse_budgets(budgets) if budgets else run.config["budgets"], metric)


@scale.command("fit")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@_metric_option
@click.option("--normalize", type=click.Choice(NORMALIZATIONS), default="none", show_default=True,
              help="none: fit the metric itself with the standard logistic, so predictions are metrics; "
                   "dataset: the paper's z-score of each run's metric and a fitted sigmoid, so runs of different "
                   "difficulty share the model (predictions are then z-scores, which rank a task's configurations).")
@click.option("--out", "out", type=click.Path(path_type=Path),
              help=f"Fit file (JSON) [default: RUN_DIR/{FIT_FILE}]; the predicted-vs-actual PNG goes beside it.")
def fit_command(run_dirs: tuple[Path, ...], metric: str, normalize: str, out: Path | None) -> None:
    """Fit the computation allocation model σ⁻¹(P) ≈ (a + b⊙i)ᵀ log(θ + 0.01) + c to grid runs.

    Each RUN_DIR is a task (a dataset); a, b and c are shared, each task and method (DRAG, IterDRAG)
    gets its own i from its base configurations (k=0,m=0; k=1,m=0; k=0,m=1); a method without them is
    left out. Prints the parameters, R² and MSE, and writes the fit and a predicted-vs-actual plot (with
    --normalize dataset its predictions are put back on the metric's scale with each run's mean and sd).
    """
    tasks = [t for d in run_dirs for t in tasks_from_summaries(str(d), summarize(load_grid(d).rows), metric)]
    allocation = fit(tasks, metric=metric, normalize=normalize)
    out = out_file(out or run_dirs[0] / FIT_FILE)
    save_fit(allocation, out)
    click.echo(fit_report(allocation))
    plot = plot_predicted_vs_actual(allocation, out.with_name(f"{out.stem}_predicted_vs_actual.png"))
    click.echo(f"wrote {out} and {plot}", err=True)


@scale.command(short_help="Leave-one-dataset-out test of the allocation model (the paper's Table 3).")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--budgets", help="Token budgets L_max, like 2k,4k,16k [default: those the runs record].")
@_metric_option
@click.option("--normalize", type=click.Choice(NORMALIZATIONS), default="dataset", show_default=True,
              help="dataset: z-score each run's metric and fit a sigmoid, as the paper does; none: fit the metric "
                   "itself (runs of different difficulty then pull the shared model apart).")
@click.option("--baseline-shots", type=click.IntRange(min=1), default=BASELINE_SHOTS, show_default=True,
              help="The baseline is DRAG with this many demonstrations (or the most a run has below it), "
                   "scaled by documents, as in the paper.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--out", "out", type=click.Path(path_type=Path), help="Also write the results (JSON) here.")
def loo(run_dirs: tuple[Path, ...], budgets: str | None, metric: str, normalize: str, baseline_shots: int,
        as_json: bool, out: Path | None) -> None:
    """Hold out each RUN_DIR (a dataset's grid run) in turn: fit the allocation model on the others, take
    the held-out run's i from its base configurations, and per budget compare the actual score of the
    configuration the model picks among those the run measured with the best of them (the oracle) and
    with the fixed-shot baseline."""
    names = [str(d) for d in run_dirs]
    if len(set(names)) < len(names):
        raise ConfigError(f"a run directory is given twice ({', '.join(names)}); give each dataset's run once")
    runs = {name: load_grid(d) for name, d in zip(names, run_dirs, strict=True)}
    recorded = {b for r in runs.values() for b in r.config.get("budgets") or []}
    limits = parse_budgets(budgets) if budgets else sorted(recorded)  # none: leave_one_dataset_out says so
    result = leave_one_dataset_out({name: summarize(r.rows) for name, r in runs.items()}, limits, metric=metric,
                                   normalize=normalize, baseline_shots=baseline_shots)
    if out is not None:
        out = out_file(out)
        out.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
        click.echo(f"wrote {out}", err=True)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    click.echo(leave_one_out_report(result))
    for d in result.datasets:
        for note in d.notes:
            click.echo(f"note: {d.dataset}: {note}", err=True)


_UNRUN_HELP = (
    "Also propose configurations no grid ran, from --documents x --shots x --iterations; their tokens are "
    "estimated from the task's per-document, per-shot and per-iteration costs (least squares over its measured "
    "configurations). Off by default: such a pick rests on the model's extrapolation of its log-linear gain and "
    "on an estimated token count, neither checked on the task; use it to choose what to run next "
    "(`ragfunnel scale grid`), then plan again.")


@click.command(cls=Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--budget", required=True, help="Effective-context budget L_max in tokens, like 16k.")
@click.option("--fit", "fit_path", required=True, type=click.Path(path_type=Path),
              help="Fit file written by `ragfunnel scale fit`.")
@click.option("--task", "task_dir", required=True, type=click.Path(path_type=Path),
              help="Grid run on the target task holding at least its base configurations (k=0,m=0; k=1,m=0; "
                   "k=0,m=1), which give its i.")
@click.option("--unrun/--no-unrun", "allow_unrun", default=False, show_default=True, help=_UNRUN_HELP)
@grid_axes_options("With --unrun: values of {letter} ({meaning}) to propose.")
@click.option("--top", type=click.IntRange(min=1), default=1, show_default=True,
              help="Show the best N proposals.")
@click.option("--json", "as_json", is_flag=True, help="Print the choice as JSON.")
def plan(budget: str, fit_path: Path, task_dir: Path, allow_unrun: bool, documents: str, shots: str,
         iterations: str, top: int, as_json: bool) -> None:
    """Print the configuration θ = (k, m, n) the allocation model predicts best within --budget.

    Candidates are the configurations of the task's run and of the fit's grids (and with --unrun, every
    configuration of the given k, m and n). A candidate's effective context length is its mean measured on
    the task, else an estimate from the task's per-unit token costs, else its mean over the fit's grids.
    Proposals the task never ran are marked. Under a fit with --normalize dataset the predictions are
    z-scores: they rank the candidates but are not metrics.
    """
    context = click.get_current_context()
    given = [f"--{name}" for name in ("documents", "shots", "iterations")
             if context.get_parameter_source(name) != click.core.ParameterSource.DEFAULT]
    if given and not allow_unrun:
        raise ConfigError(f"{', '.join(given)} only apply with --unrun (they choose the configurations it proposes); "
                          "add --unrun")
    limit = parse_budget(budget)
    allocation = load_fit(fit_path)
    space = (_ints(documents, "--documents"), _ints(shots, "--shots"), _ints(iterations, "--iterations"))
    candidates = task_candidates(allocation, summarize(load_grid(task_dir).rows), task=str(task_dir),
                                 unrun=allow_unrun, documents=space[0], shots=space[1], iterations=space[2])
    for note in candidates.notes:
        click.echo(f"note: {note}", err=True)
    ranked = candidates.rank(allocation, limit)[:top]
    if as_json:
        click.echo(json.dumps(plan_json(ranked, allocation, candidates), indent=2))
        return
    click.echo(plan_report(ranked, allocation, candidates))


scale.add_command(plan)  # `ragfunnel scale plan` is `ragfunnel plan`

