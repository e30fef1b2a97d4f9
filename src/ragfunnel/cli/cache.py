"""``ragfunnel cache info|clear``: the on-disk LLM call cache that ``ask``, ``eval`` and ``scale grid`` share."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from ragfunnel.cli.common import Group
from ragfunnel.llm.bundled import cache_dir
from ragfunnel.llm.call_cache import CALLS_FILE, CacheInfo, CallCache


def _path() -> Path:
    return cache_dir() / CALLS_FILE


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
def cache() -> None:
    """The on-disk LLM call cache: a call with the same model weights, prompt, sampling settings, seed and
    number of samples is answered from it. `ask`, `eval` and `scale grid` use it unless given --no-cache;
    it lives in $RAGFUNNEL_CACHE (else ~/.cache/ragfunnel) as calls.sqlite."""


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
    if as_json:
        click.echo(json.dumps(asdict(summary), indent=2))
        return
    click.echo(f"{summary.path}: {summary.entries:,} entries, {summary.bytes / 1e6:,.1f} MB")
    for m in summary.models:
        click.echo(f"{m.entries:>10,}  {m.fingerprint}  ({', '.join(m.names)})")


@cache.command()
@click.option("--model", metavar="SPEC_OR_FINGERPRINT",
              help="Only this model's entries: its spec (bundled:NAME, gguf:PATH as it was given, "
                   "openai:URL#MODEL) or a fingerprint from `ragfunnel cache info`.")
def clear(model: str | None) -> None:
    """Delete the cached calls (all of them, or one model's)."""
    path = _path()
    removed = 0
    if path.exists():
        calls = CallCache(path, strict=True)
        removed = calls.clear(model)
        calls.close()
    click.echo(f"removed {removed:,} {'entry' if removed == 1 else 'entries'} from {path}")
