"""``ragfunnel ask``: answer one question from files or a corpus index, and print the answer (stdout), then its
citations, confidence and stages (stderr)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from ragfunnel.api import answer_located
from ragfunnel.cli.common import (
    document_options,
    known_task,
    method_options,
    model_settings,
    read_limits,
    reading_bars,
    remote_embedder_option,
)
from ragfunnel.cli.live import live_line
from ragfunnel.confidence import Abstaining, abstained
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.documents import read_context
from ragfunnel.errors import ConfigError
from ragfunnel.methods import (
    DEFAULT_CORPUS_METHOD,
    DEFAULT_METHOD,
    METHODS,
    MODELS,
    check_options,
    check_source,
    described,
    make_method,
)
from ragfunnel.source import Source
from ragfunnel.types import Prediction, on_stage

SOURCE_REFUSAL = ("pass either --context PATH (documents to answer from) or --index DIR (a corpus index), not both "
                  "or neither")


@click.command()
@click.argument("question")
@click.option("--context", "context_paths", multiple=True, metavar="PATH",
              help="File or folder to answer from: PDF (scans by OCR), DOCX, EPUB, HTML, Markdown, UTF-8 text, "
                   "spreadsheets, slides or images ('-' reads stdin). "
                   "Repeat it to answer from several files as one context; a folder adds every supported file "
                   "under it.")
@click.option("--index", "index_dir", type=click.Path(path_type=Path),
              help="Answer from a corpus index (`ragfunnel index`) instead, with --method funnel, drag or iterdrag.")
@click.option("--method", type=click.Choice(list(METHODS)),
              help="; ".join(f"{name}: {described(name)}" for name in METHODS) +
                   f" [default: {DEFAULT_METHOD} with --context, {DEFAULT_CORPUS_METHOD} with --index].")
@click.option("--task", default="qa", show_default=True, callback=known_task, metavar="TASK",
              help="Prompt family: qa (short answer), multihop, summary (query-based), choice (multiple choice), "
                   "or a LongBench dataset's own prompt and answer limit, longbench/DATASET (e.g. longbench/qasper).")
@click.option("--choice", "choices", multiple=True, metavar="TEXT",
              help="An option for --task choice (repeat for each option, in order).")
@method_options
@document_options
@remote_embedder_option
@click.option("--json", "as_json", is_flag=True, help="Print the full prediction as JSON.")
def ask(question: str, context_paths: tuple[str, ...], index_dir: Path | None, method: str | None, task: str,
        choices: tuple[str, ...], remote_embedder: str | None, as_json: bool, **given: Any) -> None:
    """Answer QUESTION from the files in --context (or from a corpus --index), citing where the answer is."""
    model_settings(given)
    limits = read_limits(given)
    below = given.pop("abstain", None)
    options = {k: v for k, v in given.items() if v is not None}
    source = Source(files=context_paths or None, index=index_dir, refusal=SOURCE_REFUSAL)
    method = method or (DEFAULT_METHOD if source.index is None else DEFAULT_CORPUS_METHOD)
    check_source(method, index=source.index)
    check_options(method, {k: v for k, v in options.items() if k not in MODELS}, over_index=source.index is not None)
    with reading_bars():
        located = None if source.files is None else read_context(list(source.files), limits)
    if remote_embedder is not None and source.index is None:
        raise ConfigError("--remote-embedder trusts the embeddings server of an --index; --context uses none")
    index = None if source.index is None else CorpusIndex(source.index, remote_embedder=remote_embedder)
    chosen = make_method(method, index=index, task=task, **options)  # before any model loads
    if below is not None:
        chosen = Abstaining(chosen, below)
    with _progress(options.get("strong"), enabled=not as_json):
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
        if prediction.citation_note:
            click.echo(f"({prediction.citation_note})", err=True)
        if prediction.confidence is not None:
            click.echo(f"confidence {prediction.confidence:.2f}" + ("  (abstained: below --abstain)"
                                                                    if abstained(prediction) else ""), err=True)
        if prediction.supported is False and not abstained(prediction):
            click.echo(caution(prediction.confidence, method), err=True)
        click.echo(_summary(prediction), err=True)


def caution(confidence: float, method: str) -> str:
    """The one line printed under an answer whose confidence is below the calibration's ``supported_at``."""
    climb = "--prefer quality" if method == "auto" else "--method auto --prefer quality"
    return (f"caution: this answer is likely wrong (confidence {confidence:.2f}); check its citations, or ask with "
            f"{climb}, a stronger --strong model, or --abstain to withhold such answers")


@contextmanager
def _progress(strong: str | None, *, enabled: bool) -> Iterator[None]:
    """On a terminal: one live line on stderr with the running stage, its seconds, how much of a long prompt is
    read, and the answering model's text as it is written, erased before the answer is printed, once, on stdout."""
    if not (enabled and sys.stderr.isatty()):
        yield
        return
    from ragfunnel.llm import DEFAULT_STRONG, reading_progress, resolve, streaming

    llm = resolve(strong or DEFAULT_STRONG)
    with live_line(sys.stderr) as line, on_stage(line.done, started=line.started), streaming(llm, line.wrote), \
            reading_progress(line.reading):
        yield


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
