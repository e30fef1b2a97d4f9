"""What every request passes before the API sees it, and what every response carries.

- **Host**: only loopback names (``127.0.0.1``, ``localhost``, ``[::1]``, any port) and the hosts the
  operator allowed (``--allowed-host``). A web page that points its own DNS name at 127.0.0.1 (DNS
  rebinding) sends that name as Host and is refused with 421, as Jupyter and Ollama refuse it.
- **Origin**: a browser request that changes state (anything but GET, HEAD, OPTIONS), sent from a page of
  another origin, is refused with 403 unless the operator allowed that origin (``--cors-origin``).
- **Token**: with a token set, every ``/v1`` request must carry it (401).
- **Body**: a body over the limit is refused with 413, whether it declares its length or arrives in chunks;
  it is read whole before the app sees it, so the app never meets a body cut short. A body that is not a
  multipart upload is JSON to every route, and one nested deeper than :data:`~ragfunnel.bounded.MAX_JSON_DEPTH`
  is refused with 400 before any parser recurses into it (Python's raises RecursionError on a few thousand).
- **Headers**: a CSP that lets a page run only the inspector's own files, no framing, nosniff, no referrer.

Requests are logged with their timings, never their content.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Iterable
from typing import Any

from ragfunnel.bounded import MAX_JSON_DEPTH, json_depth_exceeds
from ragfunnel.serve.openai_compat import CHAT_PATH, error_body

log = logging.getLogger("ragfunnel.serve")

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                 b"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                                 b"frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def host_name(host_header: str) -> str:
    """The name in a Host header, without its port or IPv6 brackets, lower case (``[::1]:8000`` -> ``::1``);
    empty for a header that is not ``name[:port]`` or ``[address][:port]``."""
    host = host_header.strip().lower()
    if host.startswith("["):
        address, _, port = host[1:].partition("]")
        return address if port == "" or (port[:1] == ":" and port[1:].isdigit()) else ""
    name, colon, port = host.partition(":")
    return name.rstrip(".") if not colon or port.isdigit() else ""


class Guard:
    """ASGI middleware in front of the whole app: host, origin, token and body checks, security headers, a log line."""

    def __init__(self, app: Any, *, token: str | None, body_limit: int, allowed_hosts: Iterable[str] = (),
                 allowed_origins: Iterable[str] = ()):
        self.app, self.token, self.body_limit = app, token, body_limit
        allowed = {host_name(h) for h in allowed_hosts}
        self.any_host = "*" in allowed
        self.hosts = LOOPBACK_HOSTS | allowed
        self.origins = set(allowed_origins)
        self.any_origin = "*" in self.origins

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":  # the service has none; refused before anything could check it
            return await send({"type": "websocket.close", "code": 1008})
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 0

        async def send_with_headers(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is None:
                body, refusal = await self._read_body(receive)
            if refusal is None:
                refusal = _nesting_refusal(scope, body)
            if refusal is not None:
                return await _reply(send_with_headers, scope["path"], *refusal)
            await self.app(scope, _replay(body, receive), send_with_headers)
        finally:
            log.info("%s %s %d %.3fs", scope["method"], scope["path"], status, time.perf_counter() - started)

    def _refusal(self, scope: dict) -> tuple[int, str, dict[str, str]] | None:
        """(status, detail, headers) for a request refused on its headers alone; None to go on."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        host = headers.get("host", "")
        if not self.any_host and host_name(host) not in self.hosts:
            return 421, (f"this server answers requests for {', '.join(sorted(self.hosts))}, not {host[:100]!r}; "
                         "start it with --allowed-host NAME to answer NAME too"), {}
        origin = headers.get("origin")
        if scope["method"] not in SAFE_METHODS and origin is not None and not self.any_origin \
                and origin not in self.origins and origin != f"{scope.get('scheme', 'http')}://{host}":
            return 403, (f"requests from pages of another site (Origin {origin[:100]!r}) are refused; start the "
                         "server with --cors-origin ORIGIN to let that site call the API"), {}
        # A CORS preflight (OPTIONS) never carries credentials, by the browser's rules: it is not asked for them.
        if self.token and scope["path"].startswith("/v1") and scope["method"] != "OPTIONS" \
                and not _authorized(headers, self.token):
            return 401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"}
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.body_limit:
            return self._too_large()
        return None

    async def _read_body(self, receive: Any) -> tuple[bytes, tuple[int, str, dict[str, str]] | None]:
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before sending it all
                return b"", (400, "the request body was cut short", {})
            parts.append(message.get("body", b""))
            size += len(parts[-1])
            if size > self.body_limit:
                return b"", self._too_large()
            if not message.get("more_body", False):
                return b"".join(parts), None

    def _too_large(self) -> tuple[int, str, dict[str, str]]:
        return 413, f"the request body is over the limit of {self.body_limit:,} bytes", {}


def _nesting_refusal(scope: dict, body: bytes) -> tuple[int, str, dict[str, str]] | None:
    """400 for a JSON body nested past MAX_JSON_DEPTH; a multipart upload holds files, which are not JSON."""
    content_type = dict(scope.get("headers") or []).get(b"content-type", b"")
    if content_type.lower().startswith(b"multipart/"):
        return None
    try:
        if not json_depth_exceeds(body, MAX_JSON_DEPTH):
            return None
    except UnicodeDecodeError:  # not text in any encoding JSON allows: the route says so in its own words
        return None
    return 400, (f"the request body nests too deeply (over {MAX_JSON_DEPTH} levels of brackets); send JSON "
                 f"nested at most {MAX_JSON_DEPTH} deep"), {}


def _authorized(headers: dict[str, str], token: str) -> bool:
    given = headers.get("authorization", "")
    return given.startswith("Bearer ") and hmac.compare_digest(given[len("Bearer "):].encode(), token.encode())


def _replay(body: bytes, receive: Any) -> Any:
    """A receive that gives the app the body read already, then what the client sends next (its disconnect)."""
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _reply(send: Any, path: str, status: int, detail: str, headers: dict[str, str]) -> None:
    """The refusal as JSON: ``{"detail": ...}``, or OpenAI's error object on its endpoint."""
    body = json.dumps(error_body(status, detail) if path == CHAT_PATH else {"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           *((k.lower().encode(), v.encode()) for k, v in headers.items())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
