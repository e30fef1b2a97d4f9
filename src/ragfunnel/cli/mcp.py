"""``ragfunnel mcp``: ragfunnel's tools for MCP hosts (the [mcp] extra)."""

from __future__ import annotations

from pathlib import Path

import click

from ragfunnel.cli.common import declared_option, document_options, read_limits, remote_embedder_option
from ragfunnel.cli.serve import named_indexes
from ragfunnel.errors import MissingExtra
from ragfunnel.llm import set_disk_caches
from ragfunnel.serve.settings import TOKEN_ENV, Settings


@click.command()
@click.option("--root", type=click.Path(path_type=Path, file_okay=False, exists=True), default=".",
              show_default=True, help="The folder whose files clients may read; paths outside it are refused.")
@click.option("--http", "http_port", type=click.IntRange(1, 65535), metavar="PORT",
              help="Serve streamable HTTP on 127.0.0.1:PORT at /v1/mcp instead of stdio.")
@click.option("--token", envvar=TOKEN_ENV, metavar="SECRET",
              help=f"With --http: the bearer token every request must carry (also ${TOKEN_ENV}).")
@declared_option(Settings, "light")
@declared_option(Settings, "strong")
@click.option("--index", "indexes", multiple=True, metavar="NAME=DIR",
              help="A corpus index the search tool may use by NAME (repeatable).")
@click.option("--no-cache", is_flag=True,
              help="Bypass the on-disk caches (LLM calls, kept document states); memory keeps them per process.")
@document_options
@remote_embedder_option
def mcp(root: Path, http_port: int | None, token: str | None, light: str, strong: str, indexes: tuple[str, ...],
        no_cache: bool, remote_embedder: str | None, **given: object) -> None:
    """Serve ragfunnel's tools over the Model Context Protocol: answer, search, add_document, list_documents.

    Over stdio by default, for an MCP host to start; models load at the first answer."""
    try:
        from ragfunnel.serve.mcp_tools import ToolState, serve_http, serve_stdio
    except ImportError as e:
        raise MissingExtra(e.name or "mcp", "mcp") from None

    set_disk_caches(not no_cache)
    settings = Settings(light=light, strong=strong, read_limits=read_limits(given), remote_embedder=remote_embedder)
    state = ToolState(root=root.resolve(), settings=settings,
                      indexes={name: Path(path) for name, path in named_indexes(indexes).items()})
    if http_port is None:
        serve_stdio(state)
    else:
        serve_http(state, port=http_port, token=token)
