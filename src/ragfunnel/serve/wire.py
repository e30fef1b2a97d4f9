"""What the service writes back, safe for a browser: JSON with U+2028/U+2029 escaped (:class:`BrowserSafeJSON`),
server-sent event frames, and errors as HTTP statuses and bodies (``{"detail": ...}``, or OpenAI's error object
on the chat-completions path).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from ragfunnel.errors import BackendUnavailable, ConfigError, InputError, ModelError, RagfunnelError
from ragfunnel.methods import METHODS
from ragfunnel.serve.answering import NotFound
from ragfunnel.serve.jobs import Cancelled
from ragfunnel.serve.openai_compat import CHAT_PATH, error_body
from ragfunnel.serve.options import client_options
from ragfunnel.serve.request_bodies import AnswerIn, DocumentIn, SearchIn
from ragfunnel.text.hygiene import browser_safe


class BrowserSafeJSON(JSONResponse):
    """JSON with U+2028 and U+2029 escaped: legal in JSON, but line ends to JavaScript's line-based parsing."""

    def render(self, content: Any) -> bytes:
        return browser_safe(json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))).encode()


def event_frame(kind: str, data: Any) -> str:
    """One server-sent event of ragfunnel's own stream."""
    return f"event: {kind}\ndata: {browser_safe(json.dumps(data, ensure_ascii=False))}\n\n"


REQUEST_FIELDS = frozenset(name for body in (DocumentIn, AnswerIn, SearchIn) for name in body.model_fields)
SENT_AS = {"context": "text or document_id"}  # library options a request carries in fields of other names
CLIENT_OPTIONS = frozenset(name for method in METHODS for over_index in (False, True)
                           for name in client_options(method, over_index=over_index))


def http_spelling(name: str) -> str:
    """An option named in an error, as a client writes it: a field of the request body as it is
    (``document_id``; the context is ``text or document_id``), a method's option inside the body's ``options``
    (``options.budget``), and what only the operator sets as the server's setting."""
    if name in SENT_AS or name in REQUEST_FIELDS:
        return SENT_AS.get(name, name)
    return f"options.{name}" if name in CLIENT_OPTIONS else f"the server's {name} setting"


def status_of(error: RagfunnelError) -> int:
    """The HTTP status of a library error."""
    if isinstance(error, Cancelled | BackendUnavailable | ModelError):  # the server keeps serving
        return 503
    if isinstance(error, NotFound):
        return 404
    if isinstance(error, InputError | ConfigError):
        return 422
    return 500


def error_response(request: Request, status: int, detail: str, *, headers: dict[str, str] | None = None,
                   extra: dict[str, Any] | None = None, param: str | None = None) -> JSONResponse:
    """``{"detail": ...}``, or on the OpenAI endpoint OpenAI's error object (a bad request is 400 there)."""
    if request.url.path == CHAT_PATH:
        status = 400 if status == 422 else status
        return BrowserSafeJSON(error_body(status, detail, param=param), status_code=status, headers=headers)
    return BrowserSafeJSON({"detail": detail, **(extra or {})}, status_code=status, headers=headers)
