"""``ragfunnel cache info|clear``: the on-disk LLM call cache that ``ask``, ``eval`` and ``scale grid`` share,
the documents' kept model states (``kv/``) and the per-document work (``documents/``: chunks, token counts,
BM25, vectors)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from ragfunnel.cli.common import Group
from ragfunnel.llm.cache_paths import cache_dir
from ragfunnel.llm.call_cache import CALLS_FILE, CacheInfo, CallCache
from ragfunnel.llm.prefix_store import default_prefix_store
from ragfunnel.retrieve.document_cache import DIRECTORY, DocumentCache


def _path() -> Path:
    return cache_dir() / CALLS_FILE


def _documents() -> DocumentCache:
    """The document cache where ask, eval, serve and mcp keep it (whatever --no-cache said elsewhere)."""
    return DocumentCache(cache_dir() / DIRECTORY)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
def cache() -> None:
    """The on-disk LLM call cache: a call with the same model weights, prompt, sampling settings, seed and
    number of samples is answered from it. `ask`, `eval` and `scale grid` use it unless given --no-cache;
    it lives in $RAGFUNNEL_CACHE (else ~/.cache/ragfunnel) as calls.sqlite. Beside it, kv/ holds the
    model states of documents already read (read once, ask many), and documents/ the work on each document that
    no question changes (its chunks, their token counts, BM25, MiniLM vectors); --no-cache bypasses both."""


@cache.command()
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def info(as_json: bool) -> None:
    """Entries per model and the size on disk."""
    path = _path()
    # Looking must not create the file.
    summary = CacheInfo(str(path), 0, 0, ())
    if path.exists():
        calls = CallCache(path, strict=True)
        summary = calls.info()
        calls.close()
    states = default_prefix_store()
    files, size = states.size()
    documents = _documents().info()
    if as_json:
        click.echo(json.dumps({**asdict(summary), "document_states": {"path": str(states.root), "files": files,
                                                                      "bytes": size},
                               "documents": asdict(documents)}, indent=2))
        return
    click.echo(f"{summary.path}: {summary.entries:,} entries, {summary.bytes / 1e6:,.1f} MB")
    for m in summary.models:
        click.echo(f"{m.entries:>10,}  {m.fingerprint}  ({', '.join(m.names)})")
    click.echo(f"{states.root}: {files:,} document states, {size / 1e6:,.1f} MB "
               f"(least recently used dropped past {states.max_bytes / 2**30:.0f} GiB)")
    click.echo(f"{documents.path}: {documents.entries:,} documents' chunks, token counts, BM25 and vectors, "
               f"{documents.bytes / 1e6:,.1f} MB "
               f"(least recently used dropped past {documents.max_bytes / 2**30:g} GiB)")


@cache.command()
@click.option("--model", metavar="SPEC_OR_FINGERPRINT",
              help="Only this model's entries: its spec (bundled:NAME, gguf:PATH as it was given, "
                   "openai:URL#MODEL) or a fingerprint from `ragfunnel cache info`.")
def clear(model: str | None) -> None:
    """Delete the cached calls (all of them, or one model's) and, without --model, the document states and the
    per-document work."""
    path = _path()
    removed = 0
    if path.exists():
        calls = CallCache(path, strict=True)
        removed = calls.clear(model)
        calls.close()
    click.echo(f"removed {removed:,} {'entry' if removed == 1 else 'entries'} from {path}")
    if model is None:
        states = default_prefix_store()
        click.echo(f"removed {states.clear():,} document states from {states.root}")
        documents = _documents()
        click.echo(f"removed {documents.clear():,} documents' work from {documents.root}")
