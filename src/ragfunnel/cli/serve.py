"""``ragfunnel serve``: the answering service and its inspector (the [serve] extra)."""

from __future__ import annotations

import ipaddress
import logging

import click

from ragfunnel.errors import ConfigError, MissingExtra
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG

TOKEN_ENV = "RAGFUNNEL_TOKEN"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback needs --token.")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--light", default=DEFAULT_LIGHT, show_default=True, metavar="SPEC", help="Draft model (FB-RAG).")
@click.option("--strong", default=DEFAULT_STRONG, show_default=True, metavar="SPEC", help="Answering model.")
@click.option("--token", envvar=TOKEN_ENV, metavar="SECRET",
              help=f"Bearer token every /v1 request must carry (also ${TOKEN_ENV}).")
@click.option("--queue", type=click.IntRange(1, 1000), default=8, show_default=True,
              help="Requests waiting or running at once; more get 429 with Retry-After.")
@click.option("--deadline", type=click.FloatRange(min=1), default=600.0, show_default=True,
              help="Seconds a request may take before it is cancelled (504).")
@click.option("--max-body-mb", type=click.FloatRange(min=0.001), default=8.0, show_default=True,
              help="Largest request body; larger ones get 413.")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="Allow browser pages from ORIGIN to call the API (repeatable; off by default).")
@click.option("--no-prefill", is_flag=True, help="Do not have the models read a stored document before it is asked.")
@click.option("--index", "indexes", multiple=True, metavar="NAME=DIR",
              help="A corpus index (`ragfunnel index`) clients may search and ask by NAME (repeatable); clients "
                   "never pass paths.")
@click.option("--post-ranker", default="bundled:qwen2.5-0.5b", show_default=True, metavar="SPEC",
              help="Funnel search's stage 3 attention model (with --index).")
@click.option("--no-cache", is_flag=True,
              help="Bypass the on-disk caches (LLM calls, kept document states); memory keeps them per process.")
def serve(host: str, port: int, light: str, strong: str, token: str | None, queue: int, deadline: float,
          max_body_mb: float, cors_origins: tuple[str, ...], no_prefill: bool, indexes: tuple[str, ...],
          post_ranker: str, no_cache: bool) -> None:
    """Serve the JSON API (/v1, docs at /docs) and the inspector (/) on HOST:PORT, with the models loaded once."""
    try:
        import uvicorn

        from ragfunnel.serve.app import Settings, create_app
    except ImportError as e:
        raise MissingExtra(e.name or "fastapi", "serve") from None
    if not is_loopback(host) and not token:
        raise ConfigError(f"--host {host} is reachable from other machines; set --token (or ${TOKEN_ENV}) so only "
                          "clients with it are answered, or bind 127.0.0.1")
    named = {}
    for item in indexes:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--index {item!r}: write it as NAME=DIR, e.g. --index musique=indexes/musique")
        named[name] = path
    settings = Settings(light=light, strong=strong, token=token or None, queue=queue, deadline=deadline,
                        max_body_bytes=int(max_body_mb * 1024 * 1024), cors_origins=list(cors_origins),
                        prefill=not no_prefill, indexes=named, post_ranker=post_ranker)
    if no_cache:
        from ragfunnel.llm import set_disk_caches

        set_disk_caches(False)
    logging.getLogger("ragfunnel.serve").setLevel(logging.INFO)
    click.echo(f"ragfunnel serve: loading {light} and {strong}; inspector at http://{host}:{port}/", err=True)
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning", timeout_graceful_shutdown=10)

