"""``ragfunnel serve``: the answering service and its inspector (the [serve] extra)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ragfunnel.cli.common import (
    config_option,
    declared_option,
    document_options,
    model_settings,
    read_limits,
    remote_embedder_option,
)
from ragfunnel.errors import ConfigError, MissingExtra
from ragfunnel.methods.config import FunnelConfig
from ragfunnel.serve.settings import TOKEN_ENV, Settings

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def named_indexes(given: tuple[str, ...], *, flag: str = "--index", example: str = "musique=indexes/musique"
                  ) -> dict[str, str]:
    """``--index NAME=DIR`` options (or another ``flag``'s) as {NAME: DIR}."""
    named = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"{flag} {item!r}: write it as NAME=DIR, e.g. {flag} {example}")
        if name in named:
            raise ConfigError(f"{flag} {item!r}: {name} is named twice; give each {flag} a name of its own")
        named[name] = path
    return named


@click.command()
@declared_option(Settings, "host")
@declared_option(Settings, "port")
@declared_option(Settings, "light")
@declared_option(Settings, "strong")
@declared_option(Settings, "token", envvar=TOKEN_ENV)
@declared_option(Settings, "queue")
@declared_option(Settings, "deadline")
@declared_option(Settings, "max_body_mb")
@declared_option(Settings, "cors_origins", flag="--cors-origin")
@declared_option(Settings, "prefill")
@declared_option(Settings, "indexes", flag="--index")
@declared_option(Settings, "watch")
@config_option(FunnelConfig, "pre_ranker")
@config_option(FunnelConfig, "post_ranker")
@declared_option(Settings, "allowed_hosts", flag="--allowed-host")
@click.option("--no-cache", is_flag=True,
              help="Bypass the on-disk caches (LLM calls, kept document states); memory keeps them per process.")
@click.option("--calibration", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="Calibration file for every answer's confidence (`ragfunnel calibrate`) [default: "
                   "$RAGFUNNEL_CALIBRATION, else the one shipped].")
@document_options
@remote_embedder_option
def serve(host: str, port: int, light: str, strong: str, token: str | None, queue: int, deadline: float,
          max_body_mb: float, cors_origins: tuple[str, ...], prefill: bool, indexes: tuple[str, ...],
          watch: tuple[str, ...], pre_ranker: str, post_ranker: str, allowed_hosts: tuple[str, ...], no_cache: bool,
          calibration: Path | None, remote_embedder: str | None, **limits: Any) -> None:
    """Serve the JSON API (/v1, docs at /docs) and the inspector (/) on HOST:PORT, with the models loaded once.

    The port is taken first, then the models load; either failing is one error line. SIGTERM or Ctrl-C
    answers running and queued requests with 503 and stops within a second or so.

    A watched folder (--watch NAME=DIR) is read once the server is up, then updated as its files change;
    GET /v1/indexes shows its files, the files pending, failed and the update under way.
    """
    try:
        import uvicorn

        from ragfunnel.serve.answering import load
        from ragfunnel.serve.app import create_app
        from ragfunnel.serve.watching import checked_watches
    except ImportError as e:
        raise MissingExtra(e.name or "fastapi", "serve") from None
    if not is_loopback(host) and not token:
        raise ConfigError(f"--host {host} is reachable from other machines; set --token (or ${TOKEN_ENV}) so only "
                          "clients with it are answered, or bind 127.0.0.1")
    if "*" in allowed_hosts and not token:
        raise ConfigError("--allowed-host '*' answers requests for any host name, so any web page could reach the "
                          f"server by DNS rebinding; set --token (or ${TOKEN_ENV}) too, or name the hosts")
    named = named_indexes(indexes)
    hosts = [*allowed_hosts, *([] if host in ("0.0.0.0", "::") else [host])]
    settings = Settings(host=host, port=port, light=light, strong=strong, token=token or None, queue=queue,
                        deadline=deadline, max_body_mb=max_body_mb, cors_origins=list(cors_origins),
                        allowed_hosts=hosts, prefill=prefill, indexes=named, pre_ranker=pre_ranker,
                        post_ranker=post_ranker, read_limits=read_limits(limits), remote_embedder=remote_embedder,
                        watch=named_indexes(watch, flag="--watch", example="notes=~/notes"))
    checked_watches(settings)  # a bad folder, or watchfiles missing, is one line before the models load
    if no_cache:
        from ragfunnel.llm import set_disk_caches

        set_disk_caches(False)
    model_settings({"calibration": calibration})
    listener = listen(host, port)  # before the models load: a busy port is found in a second, not a minute
    logging.getLogger("ragfunnel.serve").setLevel(logging.INFO)  # its own logger: request lines, load time
    click.echo(f"ragfunnel serve: loading {light} and {strong}", err=True)
    app = create_app(settings, loaded=load(settings))
    click.echo(f"ragfunnel serve: inspector at http://{_url_host(host)}:{port}/", err=True)
    server = _stopping_server(uvicorn, uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2),
                              stop=app.state.stop)
    server.run(sockets=[listener])
    if not app.state.stop(wait=0.5):  # a generation that would not stop: its answer is wanted by nobody
        log.warning("a model was still generating at shutdown; exiting without waiting for it")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to HOST:PORT, or one ConfigError saying why it cannot be."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        # IPv4 first where a name has both (localhost), as clients and the docs say 127.0.0.1
        family, kind, proto, _, address = min(found, key=lambda a: a[0] != socket.AF_INET)
    except socket.gaierror as e:
        raise ConfigError(f"--host {host}: cannot resolve it ({e.strerror}); pass an address such as 127.0.0.1"
                          ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)  # listening now, so a second server on the port fails here and not after its models load
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is in use (another server?); stop it or pass --port N") from None
        raise ConfigError(f"cannot listen on {host}:{port} ({e.strerror}); pass a local address with --host "
                          "and a free --port") from None
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _stopping_server(uvicorn: Any, config: Any, *, stop: Callable[..., bool]) -> Any:
    """uvicorn's server, which on SIGTERM or Ctrl-C first answers every job (503), so it can stop at once."""

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # A signal handler interrupts the event loop's thread anywhere, perhaps holding the queue's lock:
            # the stop runs as the loop's next callback instead.
            try:
                asyncio.get_running_loop().call_soon_threadsafe(stop, 0.0)
            except RuntimeError:  # no loop running yet or any more: nothing is being answered
                stop(0.0)
            super().handle_exit(sig, frame)
            # uvicorn raises a captured signal again once it has stopped; this stop is the clean exit asked for
            getattr(self, "_captured_signals", []).clear()

    return Server(config)
