"""The OpenAI chat-completions wire format over ragfunnel's answers (``POST /v1/chat/completions``).

A ``model`` names a ragfunnel method (``ragfunnel-fb``, ``ragfunnel-op`` ...), never a model file, path or
URL. The document is a stored ``document_id`` or an ``index`` (extra fields of the request), or else the
text of the system messages (or, without one, of the user turns before the last). The last user message is
the question; other earlier turns go with it as conversation context. Client options pass the same typed
allow-list as ``/v1/answer``. The answer's confidence, citations and trace ride in an extra ``ragfunnel``
field; ``usage`` counts every LLM token the method spent, in all its stages. A streamed answer sends the
answering model's tokens as it writes them; its last chunk carries the clean answer and says whether the
streamed text differs from it (:class:`ChunkWriter`).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ragfunnel.errors import InputError
from ragfunnel.serve.request_bodies import DOCUMENT_ID_CHARS, INDEX_CHARS, Task
from ragfunnel.text.hygiene import browser_safe

CHAT_PATH = "/v1/chat/completions"
MODEL_PREFIX = "ragfunnel-"
HISTORY_TURNS = 6  # earlier turns kept with the question
HISTORY_CHARS = 4000
# Sampling fields OpenAI clients send; the methods choose their own sampling, so they are read and ignored.
IGNORED = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "n", "stop", "presence_penalty",
           "frequency_penalty", "seed", "user", "logprobs", "top_logprobs", "logit_bias", "metadata", "store",
           "parallel_tool_calls", "response_format", "service_tier", "reasoning_effort")
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "invalid_request_error", 421: "invalid_request_error",
               422: "invalid_request_error", 429: "rate_limit_error", 499: "invalid_request_error"}


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = Field(None, max_length=50_000_000)


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            parts = [p.text for p in self.content if p.type == "text" and p.text]
            if len(parts) != sum(p.type == "text" for p in self.content) or len(parts) != len(self.content):
                raise InputError(f"a {self.role} message holds a part that is not text; ragfunnel reads text parts")
            return "\n".join(parts)
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ChatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(max_length=200)
    messages: list[Message] = Field(min_length=1, max_length=1000)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # ragfunnel's own fields (``extra_body`` in the OpenAI SDKs)
    document_id: str | None = Field(None, max_length=DOCUMENT_ID_CHARS)
    index: str | None = Field(None, max_length=INDEX_CHARS)
    options: dict[str, Any] = Field(default_factory=dict)
    task: Task = "qa"
    choices: list[str] | None = Field(None, max_length=100)
    # read and ignored (see IGNORED)
    temperature: Any = None
    top_p: Any = None
    max_tokens: Any = None
    max_completion_tokens: Any = None
    n: Any = None
    stop: Any = None
    presence_penalty: Any = None
    frequency_penalty: Any = None
    seed: Any = None
    user: Any = None
    logprobs: Any = None
    top_logprobs: Any = None
    logit_bias: Any = None
    metadata: Any = None
    store: Any = None
    parallel_tool_calls: Any = None
    response_format: Any = None
    service_tier: Any = None
    reasoning_effort: Any = None


def model_ids(methods: list[str]) -> list[str]:
    return [MODEL_PREFIX + m for m in methods]


def method_of(model: str, methods: list[str]) -> str | None:
    """The ragfunnel method a ``model`` names, or None."""
    name = model.removeprefix(MODEL_PREFIX) if model.startswith(MODEL_PREFIX) else None
    return name if name in methods else None


def answer_request(chat: ChatIn, method: str) -> dict[str, Any]:
    """The ``/v1/answer`` body a chat request asks for."""
    messages = list(chat.messages)
    last = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    if last is None:
        raise InputError("the messages hold no user message; the last user message is the question")
    question = messages[last].text().strip()
    if not question:
        raise InputError("the last user message is empty; it is the question")
    earlier = messages[:last]
    system = [m.text() for m in earlier if m.role in ("system", "developer") and m.text().strip()]
    turns = [m for m in earlier if m.role in ("user", "assistant") and m.text().strip()]
    body: dict[str, Any] = {"method": method, "options": chat.options, "task": chat.task, "choices": chat.choices}
    if chat.document_id is not None or chat.index is not None:
        body |= {"document_id": chat.document_id, "index": chat.index}
    elif system:
        body["text"] = "\n\n".join(system)
    elif turns and all(m.role == "user" for m in turns):
        body["text"], turns = "\n\n".join(m.text() for m in turns), []
    else:
        raise InputError("no document: pass document_id or index (extra fields), or put the document's text "
                         "in a system message")
    body["question"] = _with_history(question, turns)
    return body


def _with_history(question: str, turns: list[Message]) -> str:
    if not turns:
        return question
    lines = [f"{m.role}: {' '.join(m.text().split())}" for m in turns[-HISTORY_TURNS:]]
    history = "\n".join(lines)[-HISTORY_CHARS:]
    return f"Conversation so far:\n{history}\n\nQuestion: {question}"


def _usage(result: dict[str, Any]) -> dict[str, int]:
    trace = result["trace"]
    return {"prompt_tokens": trace["input_tokens"], "completion_tokens": trace["output_tokens"],
            "total_tokens": trace["input_tokens"] + trace["output_tokens"]}


def _extra(result: dict[str, Any]) -> dict[str, Any]:
    return {"method": result["method"], "confidence": result.get("confidence"), "supported": result.get("supported"),
            "signals": result.get("signals", {}), "citations": result.get("citations", []),
            "citation_note": result.get("citation_note"), "trace": result["trace"]}


def completion(result: dict[str, Any], model: str) -> dict[str, Any]:
    """A ``chat.completion`` object for a ragfunnel answer."""
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": {"role": "assistant", "content": result["answer"]},
                                         "finish_reason": "stop", "logprobs": None}],
            "usage": _usage(result), "ragfunnel": _extra(result)}


class ChunkWriter:
    """``chat.completion.chunk`` server-sent events for one streamed answer, ending with ``[DONE]``.

    The content deltas are the answering model's text as it is written, so a client reads the answer while
    it is made. That text is raw: cleaning may cut an ``Answer:`` prefix, trim a long answer or map a letter to
    its option, and a method may answer with a second call (self-route's fallback, auto's climb), whose text
    follows the first's. So the last chunk's ``ragfunnel`` field carries the clean ``answer`` and
    ``streamed_text_differs``: whether the joined deltas are not that answer. A model that does not stream
    its text sends the clean answer as one delta at the end."""

    def __init__(self, model: str, *, include_usage: bool):
        self.model, self.include_usage = model, include_usage
        self.id, self.created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        self.started = False
        self.streamed: list[str] = []

    def _event(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        chunk = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra}
        return f"data: {browser_safe(json.dumps(chunk, ensure_ascii=False))}\n\n"

    def frame(self, kind: str, data: Any) -> str:
        """The SSE text for one of the job's events (token, stage, progress, result, error): a token is a content
        delta, a finished stage or reading progress an SSE comment (progress, and it keeps the connection alive),
        the result the last chunks (see the class)."""
        out = ""
        if not self.started:
            self.started = True
            out += self._event({"role": "assistant", "content": ""})
        if kind == "token":
            if not data["text"]:
                return out
            self.streamed.append(data["text"])
            return out + self._event({"content": data["text"]})
        if kind == "stage_started":
            return out + f": stage {data['name']} started\n\n"
        if kind == "stage":
            return out + f": stage {data['name']} {data['seconds']}s\n\n"
        if kind == "progress":
            return out + f": reading {data['what']} {data['done']}/{data['total']}\n\n"
        if kind == "result":
            streamed = "".join(self.streamed)
            if not streamed:
                out += self._event({"content": data["answer"]})
            differs = bool(streamed) and streamed.strip() != data["answer"].strip()
            extra = {**_extra(data), "answer": data["answer"], "streamed_text_differs": differs}
            out += self._event({}, "stop", ragfunnel=extra)
            if self.include_usage:
                usage = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                         "model": self.model, "choices": [], "usage": _usage(data)}
                out += f"data: {json.dumps(usage)}\n\n"
            return out + "data: [DONE]\n\n"
        if kind == "error":
            return out + f"data: {json.dumps(error_body(data['status'], data['detail']))}\n\ndata: [DONE]\n\n"
        return out


def error_body(status: int, message: str, *, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object."""
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    code = {401: "invalid_api_key", 404: "model_not_found", 413: "request_too_large",
            429: "rate_limit_exceeded"}.get(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
