"""The ``ragfunnel`` command. Library errors become one line on stderr and exit code 1."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from ragfunnel import journal
from ragfunnel.api import answer_located
from ragfunnel.api import search as search_index
from ragfunnel.cli.cache import cache
from ragfunnel.cli.calibrate import calibrate
from ragfunnel.cli.common import (
    Group,
    document_options,
    model_settings,
    ray_from,
    ray_options,
    read_limits,
    timeout_option,
)
from ragfunnel.cli.funnel import funnel as funnel_group
from ragfunnel.cli.mcp import mcp
from ragfunnel.cli.scale import plan, scale
from ragfunnel.cli.serve import serve
from ragfunnel.confidence import Abstaining, abstained
from ragfunnel.corpus import load_corpus
from ragfunnel.corpus.readers import SPLITS
from ragfunnel.documents import read_context
from ragfunnel.errors import ConfigError, InputError, RagfunnelError
from ragfunnel.eval.datasets import FORMATS, load_dataset
from ragfunnel.eval.long_context import lengthen
from ragfunnel.eval.runner import METRIC_PROFILES, EvalRow, run_eval
from ragfunnel.journal import FAILED_FILE, VERSION_KEY
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, bundled
from ragfunnel.llm.fingerprint import sha256_of_file
from ragfunnel.llm.registry import check_backends, model_identity
from ragfunnel.methods import (
    CONTEXT_METHODS,
    CORPUS_METHODS,
    DEFAULT_CORPUS_METHOD,
    DEFAULT_METHOD,
    METHODS,
    check_source,
    make_method,
    method_kind,
    options_of,
)
from ragfunnel.methods.fbrag import MAX_SAMPLES
from ragfunnel.prompts import check_task
from ragfunnel.retrieve.fusion import FUSIONS
from ragfunnel.types import Prediction
from ragfunnel.version import __version__


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ragfunnel")
@click.option("-v", "--verbose", is_flag=True,
              help="Log progress (model loads, stages) to stderr; on by default when stderr is a terminal.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr.")
@click.option("--debug", is_flag=True, help="Show the full traceback of an error instead of one line.")
def main(verbose: bool, quiet: bool, debug: bool) -> None:
    """Answer questions over text too long to give an LLM whole: FB-RAG, FunnelRAG and their baselines."""
    show_progress = verbose or (sys.stderr.isatty() and not quiet)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    logging.getLogger("ragfunnel").setLevel(logging.INFO if show_progress else logging.WARNING)


def _known_task(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    try:
        return None if value is None else check_task(value)
    except ConfigError as e:
        raise click.BadParameter(str(e)) from None


def method_options(command: Callable) -> Callable:
    """The model and budget options shared by ``ask`` and ``eval`` (unset ones keep each method's default)."""
    for option in reversed([
        click.option("--light", metavar="SPEC",
                     help="Draft model for FB-RAG Stage II [default: bundled:qwen2.5-0.5b]."),
        click.option("--strong", metavar="SPEC", help="Answering model [default: bundled:qwen2.5-1.5b]. "
                     "Specs: bundled:NAME, gguf:PATH, openai:URL#MODEL, "
                     "openai:URL1,URL2#MODEL (servers taking turns)."),
        click.option("--budget", type=click.IntRange(min=1),
                     help="Tokens of context the answering model reads [default: 1500]."),
        click.option("--stage1-budget", type=click.IntRange(min=1),
                     help="FB-RAG Stage I tokens read by the light model [default: max(3000, 2 x --budget)]."),
        click.option("--draft-from", type=click.Choice(["warm", "selection", "document"]),
                     help="What FB-RAG's drafts read: Stage I's selection, the whole document, or (warm) the whole "
                          "document when the light model already holds it or it costs about the selection's read "
                          "[default: warm]."),
        click.option("--fusion", type=click.Choice(list(FUSIONS)),
                     help="How FB-RAG mixes question and draft scores: normalized (each query's BM25 scores divided "
                          "by their maximum first) or raw (the paper's Eq. 5 as written) [default: normalized]."),
        click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True),
                     help="auto: run no method predicted to take longer (falls back to op; an error if nothing fits)."),
        click.option("--prefer", type=click.Choice(["speed", "balanced", "quality"]),
                     help="auto: how far to climb past op while the answer's confidence is low: speed (never), "
                          "balanced (to fb), quality (to fb, then lc) [default: balanced]."),
        click.option("--abstain", type=click.FloatRange(0, 1), metavar="BELOW",
                     help="Answer 'unanswerable' when the answer's confidence is below BELOW (0-1)."),
        click.option("--calibration", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
                     help="Calibration file for confidence (`ragfunnel calibrate`) [default: $RAGFUNNEL_CALIBRATION, "
                          "else the one shipped, fitted on the bundled models]."),
        click.option("--samples", type=click.IntRange(1, MAX_SAMPLES), help="FB-RAG drafts K [default: 5]."),
        click.option("--chunk-words", type=click.IntRange(1, 100_000), help="Words per chunk [default: 300]."),
        click.option("--seed", type=int, help="Sampling seed for FB-RAG drafts [default: 0]."),
        click.option("--no-cache", is_flag=True,
                     help="Bypass the on-disk caches (LLM calls, kept document states): every call runs the model, "
                          "nothing is stored."),
        timeout_option,
    ]):
        command = option(command)
    return command


@main.command()
@click.argument("question")
@click.option("--context", "context_paths", multiple=True, metavar="PATH",
              help="File or folder to answer from: PDF, DOCX, EPUB, HTML, Markdown or UTF-8 text ('-' reads stdin). "
                   "Repeat it to answer from several files as one context; a folder adds every supported file "
                   "under it.")
@click.option("--index", "index_dir", type=click.Path(path_type=Path),
              help="Answer from a corpus index (`ragfunnel index`) instead, with --method funnel, drag or iterdrag.")
@click.option("--method", type=click.Choice(list(METHODS)),
              help="auto: op first (lc for a document the model already holds), climbing to fb (and lc, "
                   "--prefer quality) only while the answer's confidence is low; "
                   "fb: FB-RAG forward+backward; fb-f: FB-RAG forward only; op: order-preserving RAG; "
                   "vanilla: RAG in score order; self-route: OP that falls back to lc; lc: whole context; "
                   "with --index: funnel (FunnelRAG), fb (FB-RAG over the funnel's top documents, citing them), "
                   "drag (demonstrations + documents, one call), iterdrag "
                   f"(self-ask with retrieval) [default: {DEFAULT_METHOD} with --context, {DEFAULT_CORPUS_METHOD} with "
                   "--index].")
@click.option("--documents", type=click.IntRange(0, 10_000),
              help="drag/iterdrag: documents k per retrieval [default: 5].")
@click.option("--shots", type=click.IntRange(0, 10_000),
              help="drag/iterdrag: demonstrations m, from --demonstrations [default: 0].")
@click.option("--demonstrations", type=click.Path(path_type=Path),
              help="drag/iterdrag: demonstrations file (`ragfunnel scale demos`).")
@click.option("--iterations", type=click.IntRange(1, 100), help="iterdrag: most follow-up steps n [default: 5].")
@click.option("--task", default="qa", show_default=True, callback=_known_task, metavar="TASK",
              help="Prompt family: qa (short answer), multihop, summary (query-based), choice (multiple choice), "
                   "or a LongBench dataset's own prompt and answer limit, longbench/DATASET (e.g. longbench/qasper).")
@click.option("--choice", "choices", multiple=True, metavar="TEXT",
              help="An option for --task choice (repeat for each option, in order).")
@method_options
@document_options
@click.option("--json", "as_json", is_flag=True, help="Print the full prediction as JSON.")
def ask(question: str, context_paths: tuple[str, ...], index_dir: Path | None, method: str | None, task: str,
        choices: tuple[str, ...], as_json: bool, **given: Any) -> None:
    """Answer QUESTION from the files in --context (or from a corpus --index), citing where the answer is."""
    model_settings(given)
    limits = read_limits(given)
    below = given.pop("abstain", None)
    options = {k: v for k, v in given.items() if v is not None}
    if bool(context_paths) == (index_dir is not None):
        raise ConfigError("pass either --context PATH (documents to answer from) or --index DIR (a corpus index), "
                          "not both or neither")
    method = method or (DEFAULT_METHOD if index_dir is None else DEFAULT_CORPUS_METHOD)
    check_source(method, index=index_dir)
    _refuse_options(method, options, flags=given, over_index=index_dir is not None)
    located = read_context(list(context_paths), limits) if context_paths else None
    chosen = make_method(method, index=index_dir, task=task, **options)  # before any model loads
    if below is not None:
        chosen = Abstaining(chosen, below)
    with _streaming(options.get("strong"), enabled=not as_json):
        if located is None:
            prediction = chosen.run(question, choices=list(choices) or None)
        else:
            prediction = answer_located(chosen, question, located, choices=list(choices) or None)
    if as_json:
        click.echo(json.dumps(prediction.to_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(prediction.answer)
        for citation in prediction.citations[:CITATIONS_SHOWN]:
            click.echo(f"{citation.label()}  {_short_quote(citation.quote)}", err=True)  # stdout: the answer alone
        if prediction.confidence is not None:
            click.echo(f"confidence {prediction.confidence:.2f}" + ("  (abstained: below --abstain)"
                                                                    if abstained(prediction) else ""), err=True)
        click.echo(_summary(prediction), err=True)


def _refuse_options(method: str, options: dict[str, Any], *, flags: Collection[str], over_index: bool = False) -> None:
    """Refuse the options ``method`` does not take, named as the command line spells them (``make_method``
    names keywords, some of which have no flag)."""
    takes = options_of(method, over_index=over_index)
    unknown = sorted(set(options) - set(takes))
    if not unknown:
        return
    if method_kind(method) == "context" and not over_index:
        corpus = [m for m in CORPUS_METHODS if unknown[0] in options_of(m)]
        if corpus:
            raise ConfigError(f"{_flag(unknown[0])} goes with --index and --method {' or '.join(corpus)}")
    valid = ", ".join(_flag(o) for o in sorted(takes) if o in flags)
    raise ConfigError(f"--method {method} does not take {', '.join(map(_flag, unknown))}; it takes {valid}")


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


@contextmanager
def _streaming(strong: str | None, *, enabled: bool) -> Iterator[None]:
    """On a terminal, show the answering model's text on stderr as it is written (the clean answer
    still goes to stdout at the end)."""
    if not (enabled and sys.stderr.isatty()):
        yield
        return
    from ragfunnel.llm import DEFAULT_STRONG, resolve

    llm = resolve(strong or DEFAULT_STRONG)
    if not hasattr(llm, "on_text"):
        yield
        return
    llm.on_text = lambda text: click.echo(click.style(text, dim=True), nl=False, err=True)
    try:
        yield
    finally:
        llm.on_text = None
        click.echo("", err=True)


CITATIONS_SHOWN = 3  # under the answer; --json has them all


def _short_quote(quote: str, limit: int = 100) -> str:
    quote = " ".join(quote.split())
    return f"\u201c{quote if len(quote) <= limit else quote[:limit - 1] + chr(0x2026)}\u201d"


def _summary(prediction: Prediction) -> str:
    t = prediction.trace
    lines = [f"-- {prediction.method}: {t.seconds:.1f}s, {t.input_tokens} input tokens, "
             f"{len(prediction.chunks_used)} chunks used "
             f"(positions {', '.join(str(sc.chunk.position) for sc in prediction.chunks_used[:12])}"
             f"{' ...' if len(prediction.chunks_used) > 12 else ''})"]
    for s in t.stages:
        note = s.detail.get("skipped") or s.detail.get("route") or ""
        lines.append(f"   {s.name:<22} {s.seconds:7.1f}s  LLM tokens {s.input_tokens:>6} in {s.output_tokens:>4} out"
                     f"  items {s.n_in} -> {s.n_out}" + (f"  ({note})" if note else ""))
    return "\n".join(lines)


@main.command()
@click.option("--prepare", is_flag=True, help="Assemble and SHA-256-verify every installed bundled model.")
@click.option("--verify", is_flag=True,
              help="Hash every installed bundled model again in full, whatever its saved check says.")
@click.option("--measure-speeds", is_flag=True,
              help="Measure how fast the default light and strong models read and write on this machine, so the "
                   "first `ask` does not (scripts/setup.sh does this once).")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def models(prepare: bool, verify: bool, measure_speeds: bool, as_json: bool) -> None:
    """List the bundled models: role, size, path and whether each is ready."""
    if prepare or verify:
        for name in bundled.BUNDLED:
            if bundled.status(name).path is not None:
                (bundled.verify if verify else bundled.ensure)(name)
    if measure_speeds:
        from ragfunnel.llm import resolve
        from ragfunnel.llm.speed import speed_of

        started = time.perf_counter()
        for spec in (DEFAULT_LIGHT, DEFAULT_STRONG):
            speed_of(resolve(spec))
        click.echo(f"measured the speeds of {DEFAULT_LIGHT} and {DEFAULT_STRONG} on this machine in "
                   f"{time.perf_counter() - started:.0f} s (kept; `auto` plans with them)", err=True)
    rows = [bundled.status(name) for name in bundled.BUNDLED]
    if as_json:
        click.echo(json.dumps([r.__dict__ for r in rows], indent=2))
        return
    for r in rows:
        size = f"{r.size / 1e6:,.0f} MB" if r.size else "?"
        click.echo(f"bundled:{r.name:<14} {'ready' if r.ready else 'not ready':<10} {size:>9}  {r.role}")
        click.echo(f"    {r.model}, from {r.source}")
        click.echo(f"    {r.path or '-'}" + ("" if r.ready else f"\n    {r.note}"))


@main.command("eval")
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
@click.option("--task", callback=_known_task, metavar="TASK",
              help="Prompt family and scoring (qa, multihop, summary: ROUGE-L, choice: option accuracy, "
                   "longbench/DATASET) [default: the dataset's; LongBench rows: their dataset's].")
@click.option("--metric-profile", type=click.Choice(list(METRIC_PROFILES)), default="ragfunnel", show_default=True,
              help="Scoring: ragfunnel (by task: F1/EM/contains, ROUGE-L, accuracy), longbench (exactly LongBench's "
                   "metrics.py for each row's dataset), hotpotqa (the official F1/EM: yes/no answers that disagree "
                   "score 0).")
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
                 on_error: str, task: str | None, metric_profile: str, workers: int, corpus: Path | None,
                 context_words: int | None, **given: Any) -> None:
    """Run methods over DATASET, one JSONL row per (example, method), resumable."""
    model_settings(given)
    ray = ray_from(given)
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
    journal.check_free(run_dir)  # before the slow setup: a second writer stops here
    loaded = load_dataset(dataset, format=fmt, on_error=on_error, limit=limit)
    if not loaded.examples:
        raise InputError(f"{dataset} yielded no usable examples; see the skipped rows above")
    examples = loaded.examples
    if corpus is not None:
        pool = load_corpus(corpus)
        examples = [lengthen(e, pool, target_words=context_words, seed=given.get("seed") or 0) for e in examples]
    tasks = sorted({e.task for e in loaded.examples})
    if task is None and len(tasks) > 1:
        if any(t.startswith("longbench/") for t in tasks):  # each dataset has its own prompt, limit and metric
            raise ConfigError(f"{dataset} holds rows of several LongBench datasets ({', '.join(tasks)}); "
                              "split it into one file per dataset and evaluate each")
        raise ConfigError(f"{dataset} mixes tasks ({', '.join(tasks)}); pick one with --task")
    task = task or tasks[0]
    examples = [e if e.task == task else replace(e, task=task) for e in examples]  # scored as they are prompted
    options = {k: v for k, v in given.items() if v is not None}
    # Each method gets the options it takes; the run records them, so a report knows what each ran with.
    received = {name: {"task": task, **{k: v for k, v in options.items() if k in options_of(name)}} for name in names}
    methods = {name: make_method(name, **received[name]) for name in names}
    if options.get("abstain") is not None:
        methods = {name: Abstaining(m, options["abstain"]) for name, m in methods.items()}
    specs = [options.get("strong", DEFAULT_STRONG)]
    if any("light" in options_of(name) for name in names):
        specs.append(options.get("light", DEFAULT_LIGHT))
    check_backends(specs)  # a server that is down stops the run here, before any row
    config = {"dataset": str(dataset.resolve()), "dataset_sha256": sha256_of_file(dataset), "format": fmt,
              "task": task, "options": options,
              VERSION_KEY: __version__, "method_options": received,
              "models": {spec: model_identity(spec) for spec in specs}}
    if corpus is not None:
        config |= {"corpus": str(corpus.resolve()), "corpus_sha256": sha256_of_file(corpus),
                   "context_words": context_words}
    result = run_eval(examples, methods, run_dir, config=config, workers=workers, ray=ray,
                      retry_failed=retry_failed, metric_profile=metric_profile)
    click.echo(_eval_table(result.rows, names), err=False)
    if loaded.errors:
        click.echo(f"{len(loaded.errors)} dataset row(s) skipped; first: {loaded.errors[0]}", err=True)
    failed = [r for r in result.rows if r.error is not None]
    if failed and len(failed) == len(result.rows):
        raise RagfunnelError(f"every pair failed ({len(failed)}, kept in {run_dir / FAILED_FILE}); first: "
                             f"{failed[0].error}")


def _eval_table(rows: list[EvalRow], names: list[str]) -> str:
    lines = []
    for name in names:
        mine = [r for r in rows if r.method == name]
        ok = [r for r in mine if r.error is None]
        metrics = sorted({k for r in ok for k in r.metrics})
        means = "  ".join(f"{k} {sum(r.metrics.get(k, 0.0) for r in ok) / len(ok):.3f}" for k in metrics) if ok else "-"
        secs = sum(r.seconds for r in ok) / len(ok) if ok else 0.0
        lines.append(f"{name:<11} n={len(mine):<4} failed={len(mine) - len(ok):<3} {means}  mean {secs:.1f}s")
    return "\n".join(lines)


@main.command()
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


@main.command()
@click.argument("corpus", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Index directory to write.")
@click.option("--max-cluster-tokens", type=click.IntRange(min=1), default=4000, show_default=True,
              help="Largest cluster of linked documents (FunnelRAG's retrieval unit), in approximate tokens.")
@click.option("--flat", is_flag=True,
              help="Also cut documents into passages and embed them (--embedder) for `search --flat`.")
@click.option("--passage-words", type=click.IntRange(1, 100_000), default=100, show_default=True,
              help="Words per flat passage.")
@click.option("--embed-documents", is_flag=True,
              help="Also embed every document (--embedder), so the default funnel pre-ranker looks vectors up "
                   "instead of encoding each query's retrieved documents.")
@click.option("--embedder", default="bundled:minilm", show_default=True, metavar="SPEC",
              help="With --flat or --embed-documents: what embeds passages, documents and later the queries: "
                   "bundled:minilm, hf:NAME_OR_DIR (a Hugging Face encoder in the local cache, or its directory), a "
                   "model directory, or openai:URL#MODEL (an OpenAI-compatible embeddings server).")
@click.option("--faiss", metavar="auto|flat|hnsw|ivf|ivfpq|none",
              help="With --flat: a FAISS index over the passage vectors for `search --flat`. auto picks by size: exact "
                   "flat up to 100k passages, hnsw up to 1M, ivf above, ivfpq when the vectors would fill half the "
                   "memory [default: auto with the [faiss] extra installed, else none].")
@click.option("--force", is_flag=True, help="Rebuild an index that DIR already holds for another corpus.")
@click.option("--split", type=click.Choice(list(SPLITS)), default="files", show_default=True,
              help="With a folder: each file is a document, or each EPUB chapter, PDF outline section and "
                   "top-level heading is one.")
@document_options
@click.option("--json", "as_json", is_flag=True, help="Print the index manifest as JSON.")
@ray_options("With --flat or --embed-documents: embed on Ray Data workers")
def index(corpus: Path, out_dir: Path, max_cluster_tokens: int, flat: bool, passage_words: int,
          embed_documents: bool, embedder: str, faiss: str | None, force: bool, split: str, as_json: bool,
          **given: Any) -> None:
    """Index CORPUS (JSON, JSONL, a MediaWiki XML dump, or a folder of PDF, DOCX, EPUB, HTML, Markdown and text
    files) for corpus retrieval: documents, clusters, BM25.

    With --ray, the passages and documents are embedded by Ray Data workers into the same files."""
    from ragfunnel.corpus.index import build_index

    limits = read_limits(given)
    ray = ray_from(given)
    journal.out_dir(out_dir)
    docs = load_corpus(corpus, split=split, limits=limits)
    m = build_index(docs, out_dir, source=str(corpus.resolve()), max_cluster_tokens=max_cluster_tokens, flat=flat,
                    passage_words=passage_words, embed_documents=embed_documents, faiss=faiss, embedder=embedder,
                    ray=ray, force=force)
    if as_json:
        click.echo(json.dumps(m.to_json(), indent=2))
        return
    size = sum(int(f["bytes"]) for f in m.files.values())
    vectors = "document vectors, " if m.document_vectors else ""
    faiss_index = f"FAISS {m.faiss.describe()}, " if m.faiss else ""
    embedded = f"embedded by {m.embedder.spec} ({m.embedder.dim}-d), " if m.embedder else ""
    click.echo(f"{out_dir}: {m.documents} documents in {m.clusters} clusters (graph from {m.graph}, {m.edges} edges; "
               f"{m.oversize_documents} documents over {m.max_cluster_tokens} tokens), {m.passages} flat passages, "
               f"{vectors}{embedded}{faiss_index}{size / 1e6:.1f} MB, built in {m.build_seconds:.1f}s")


@main.command()
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.argument("question")
@click.option("--funnel/--flat", default=True, show_default=True,
              help="Progressive FunnelRAG retrieval (BM25 clusters -> pre-ranked documents -> attention-ranked "
                   "passages), or flat retrieval (MiniLM passage embeddings; needs `index --flat`): through the "
                   "index's FAISS index when it has one, else exact search.")
@click.option("--exact", is_flag=True, help="With --flat: exact search over every passage vector even when the index "
                                            "has a FAISS index (the reference FAISS is measured against).")
@click.option("--top-k", type=click.IntRange(1, 10_000), default=4, show_default=True, help="Passages to return.")
@click.option("--top-clusters", type=click.IntRange(min=1),
              help="Funnel stage 1: clusters kept [default: 5% of them, 4..80].")
@click.option("--top-documents", type=click.IntRange(1, 10_000), default=8, show_default=True,
              help="Funnel stage 2: documents kept.")
@click.option("--pre-ranker", "pre_ranker", default="minilm", show_default=True, metavar="SPEC",
              help="Funnel stage 2 document scorer: minilm (bundled bi-encoder), llm:MODEL-SPEC (yes/no), or a "
                   "cross-encoder directory (`ragfunnel funnel distill`) or Hugging Face name.")
@click.option("--post-ranker", "post_ranker", default="bundled:qwen2.5-0.5b", show_default=True, metavar="SPEC",
              help="Funnel stage 3 attention model: bundled:NAME, gguf:PATH, or a Hugging Face name or directory.")
@click.option("--json", "as_json", is_flag=True, help="Results and per-stage timings as JSON.")
def search(index_dir: Path, question: str, funnel: bool, exact: bool, top_k: int, top_clusters: int | None,
           top_documents: int, pre_ranker: str, post_ranker: str, as_json: bool) -> None:
    """Retrieve passages for QUESTION from an index built by `ragfunnel index`."""
    if exact and funnel:
        raise ConfigError("--exact goes with --flat (the funnel searches no passage vectors)")
    found = search_index(index_dir, question, top_k=top_k, funnel=funnel, exact=exact, top_clusters=top_clusters,
                         top_documents=top_documents, pre_ranker=pre_ranker, post_ranker=post_ranker).to_dict()
    results, stages = found["results"], found["stages"]
    if as_json:
        click.echo(json.dumps(found, indent=2, ensure_ascii=False))
        return
    for rank, r in enumerate(results, start=1):
        click.echo(f"{rank}. [{r['score']:.4g}] {r['title']}: {' '.join(r['text'].split())[:200]}")
    click.echo("-- " + "; ".join(f"{s['name']} {s['n_in']} -> {s['n_out']} in {s['seconds']:.2f}s"
                                 + (f" ({s['search']})" if "search" in s else "") for s in stages), err=True)


main.add_command(funnel_group)
main.add_command(scale)
main.add_command(plan)
main.add_command(cache)
main.add_command(serve)
main.add_command(calibrate)
main.add_command(mcp)
