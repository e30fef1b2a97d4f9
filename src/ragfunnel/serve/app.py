"""The answering service: a versioned JSON API over the library, and the inspector at ``/``.

Models are loaded once, when the app starts, and stay warm (with the document states they keep).
All model work goes through one :class:`~ragfunnel.serve.jobs.JobQueue`. Library errors map to HTTP
statuses: bad input 422, an unknown document or index 404, a failing model or server 503, a full
queue 429 (with ``Retry-After``), a passed deadline 504. Logs carry timings, never document text.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from ragfunnel.errors import BackendUnavailable, ConfigError, InputError, ModelError, RagfunnelError
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, resolve
from ragfunnel.methods import DEFAULT_CORPUS_METHOD, DEFAULT_METHOD, METHODS, make_method, method_kind, options_of
from ragfunnel.serve.documents import DocumentStore, chunk_view, prefill
from ragfunnel.serve.jobs import Cancelled, Job, JobQueue, QueueFull
from ragfunnel.types import on_stage

log = logging.getLogger("ragfunnel.serve")

API = "/v1"
# Options a client may not set: the operator chose the models and files when starting the server.
OPERATOR_OPTIONS = {"light", "strong", "demonstrations", "index"}


@dataclass
class Settings:
    """How the service runs (``ragfunnel serve`` options)."""

    light: str = DEFAULT_LIGHT
    strong: str = DEFAULT_STRONG
    token: str | None = None
    max_body_bytes: int = 8 * 1024 * 1024
    queue: int = 8
    deadline: float = 600.0
    cors_origins: list[str] = field(default_factory=list)
    documents: int = 64
    prefill: bool = True
    indexes: dict[str, str] = field(default_factory=dict)  # name -> directory, for search and corpus methods
    pre_ranker: str = "minilm"
    post_ranker: str = "bundled:qwen2.5-0.5b"


class DocumentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="The document's text (UTF-8).")
    name: str = Field("", description="A label to show for it.")
    task: str = Field("qa", description="The prompt family its questions will use (the models read it so).")


class AnswerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str
    document_id: str | None = Field(None, description="A stored document (POST /v1/documents) ...")
    text: str | None = Field(None, description="... or the text itself ...")
    index: str | None = Field(None, description="... or an index the server was started with (corpus methods).")
    method: str | None = Field(None, description="Default: auto over a text, funnel over an index.")
    options: dict[str, Any] = Field(default_factory=dict, description="The method's options, e.g. budget.")
    choices: list[str] | None = None
    task: str = "qa"
    stream: bool = Field(False, description="Server-sent events: token, stage and result (or error).")


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: str = Field(description="An index the server was started with (--index NAME=DIR).")
    question: str
    top_k: int = Field(4, ge=1, le=100)
    funnel: bool = Field(True, description="FunnelRAG's three stages, or flat dense retrieval (index --flat).")


def create_app(settings: Settings | None = None) -> FastAPI:
    """The app. Loading the models happens when it starts (``lifespan``), not here."""
    settings = settings or Settings()
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        started = time.perf_counter()
        light, strong = resolve(settings.light), resolve(settings.strong)
        for model in dict.fromkeys([light, strong]):
            await asyncio.to_thread(_warm_up, model)
        state["models"] = {"light": light, "strong": strong}
        state["jobs"] = JobQueue([light, strong], capacity=settings.queue, streaming=strong)
        state["documents"] = DocumentStore(settings.documents)
        state["methods"] = OrderedDict()
        state["indexes"] = {name: await asyncio.to_thread(_open_index, path) for name, path in settings.indexes.items()}
        state["retrievers"] = {}  # FunnelRAG's, per index, with its rankers loaded by the first search
        log.info("models ready in %.1fs: light %s, strong %s", time.perf_counter() - started, light.name, strong.name)
        yield
        state["jobs"].close()  # cancels what is queued or running: shutdown does not wait minutes

    app = FastAPI(title="ragfunnel", version="1", lifespan=lifespan,
                  description="Answer questions over long texts: FB-RAG and its baselines.")
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(_BodyLimit, limit=settings.max_body_bytes)

    @app.middleware("http")
    async def guard_and_log(request: Request, call_next: Any) -> Any:
        started = time.perf_counter()
        if request.url.path.startswith(API) and settings.token and not _authorized(request, settings.token):
            response: Any = JSONResponse({"detail": "missing or wrong bearer token"}, status_code=401,
                                         headers={"WWW-Authenticate": "Bearer"})
        else:
            response = await call_next(request)
        log.info("%s %s %d %.3fs", request.method, request.url.path, response.status_code,
                 time.perf_counter() - started)
        return response

    @app.exception_handler(RagfunnelError)
    async def library_error(request: Request, error: RagfunnelError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=_status(error))

    @app.exception_handler(QueueFull)
    async def busy(request: Request, error: QueueFull) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=429, headers={"Retry-After": str(error.retry_after)})

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        jobs = state.get("jobs")
        return {"status": "ok" if jobs else "starting", "pending": jobs.pending if jobs else 0}

    @app.get(f"{API}/models")
    async def models() -> dict[str, Any]:
        return {role: {"spec": spec, "name": llm.name, "fingerprint": llm.fingerprint,
                       "context_window": llm.context_window}
                for (role, llm), spec in zip(state["models"].items(), (settings.light, settings.strong), strict=True)}

    @app.get(f"{API}/methods")
    async def methods() -> dict[str, Any]:
        return {"default": DEFAULT_METHOD, "default_over_an_index": DEFAULT_CORPUS_METHOD,
                "methods": {name: sorted(set(options_of(name)) - OPERATOR_OPTIONS) for name in METHODS},
                "kinds": {name: method_kind(name) for name in METHODS}, "indexes": sorted(state["indexes"])}

    @app.post(f"{API}/search")
    async def search(body: SearchIn) -> dict[str, Any]:
        index = _index(state, body.index)

        def work(job: Job) -> dict[str, Any]:
            if body.index not in state["retrievers"]:
                state["retrievers"][body.index] = _retriever(index, settings)
            return _search(state["retrievers"][body.index], body)

        job = state["jobs"].submit(work, label=f"search {body.index}")
        try:
            return await state["jobs"].result(job, deadline=settings.deadline)
        except TimeoutError:
            raise HTTPException(504, f"no result within the deadline of {settings.deadline:g} s") from None

    @app.post(f"{API}/documents", status_code=201)
    async def add_document(body: DocumentIn) -> dict[str, Any]:
        doc, new = state["documents"].add(body.text, body.name)
        if new and settings.prefill:
            doc.prefill.update({"light": "queued", "strong": "queued"})
            try:
                state["jobs"].submit(lambda job: prefill(doc, **state["models"], task=body.task),
                                     label=f"prefill {doc.id}")
            except QueueFull:
                doc.prefill.update({"light": "skipped: the server was busy", "strong": "skipped: the server was busy"})
        return doc.summary()

    @app.get(f"{API}/documents")
    async def list_documents() -> list[dict[str, Any]]:
        return [d.summary() for d in state["documents"].all()]

    @app.get(f"{API}/documents/{{doc_id}}")
    async def get_document(doc_id: str) -> dict[str, Any]:
        doc = _document(state, doc_id)
        return {**doc.summary(), "text": doc.text}

    @app.post(f"{API}/answer", response_model=None)
    async def answer(body: AnswerIn, request: Request) -> Any:
        if sum(x is not None for x in (body.document_id, body.text, body.index)) != 1:
            raise InputError("pass exactly one of document_id (a stored document), text, and index")
        text = _document(state, body.document_id).text if body.document_id else body.text
        method = _method(state, settings, body)
        label = f"{method.name} answer"

        def work(job: Job) -> dict[str, Any]:
            started = time.perf_counter()
            with on_stage(job.on_stage or (lambda stage: None)):
                if text is None:  # a corpus method over one of the server's indexes
                    prediction = method.run(body.question, choices=body.choices)
                else:
                    prediction = method.run(body.question, text, choices=body.choices)
            job.check()
            log.info("%s: %.1fs, %d input tokens, question %d chars, document %d chars", label,
                     time.perf_counter() - started, prediction.trace.input_tokens, len(body.question),
                     len(text or ""))
            if text is None:
                return prediction.to_dict()
            return {**prediction.to_dict(),
                    "chunks": chunk_view(text, prediction, question=body.question,
                                         chunk_words_=body.options.get("chunk_words"))}

        if not body.stream:
            job = state["jobs"].submit(work, label=label)
            try:
                return await state["jobs"].result(job, deadline=settings.deadline)
            except TimeoutError:
                raise HTTPException(504, f"no answer within the deadline of {settings.deadline:g} s") from None
        return _stream(state, settings, work, label, request)

    return _with_inspector(app)


def _index(state: dict[str, Any], name: str) -> Any:
    if name not in state["indexes"]:
        raise HTTPException(404, f"no index {name!r}; this server has: "
                                 f"{', '.join(sorted(state['indexes'])) or 'none (start it with --index NAME=DIR)'}")
    return state["indexes"][name]


def _open_index(path: str) -> Any:
    from ragfunnel.corpus.index import CorpusIndex

    return CorpusIndex(path)


def _retriever(index: Any, settings: Settings) -> Any:
    """FunnelRAG's retriever over ``index``, its rankers loaded now rather than on the first search."""
    from ragfunnel.corpus.funnel import FunnelRetriever
    from ragfunnel.retrieve.attention import load_post_ranker
    from ragfunnel.retrieve.rerank import load_pre_ranker

    return FunnelRetriever(index, pre_ranker=load_pre_ranker(settings.pre_ranker, stored=index.document_vectors,
                                                             embedder=index.embedder),
                           post_ranker=load_post_ranker(settings.post_ranker))


def _search(retriever: Any, body: SearchIn) -> dict[str, Any]:
    from ragfunnel.corpus.funnel import flat_search
    from ragfunnel.methods.base import check_question

    question = check_question(body.question)
    if not body.funnel:
        return flat_search(retriever.index, question, body.top_k).to_dict()
    retriever.top_passages = body.top_k
    return retriever.search(question).to_dict()


def _warm_up(model: Any) -> None:
    warm = getattr(model, "warm_up", None)
    if warm is not None:
        warm()


def _authorized(request: Request, token: str) -> bool:
    given = request.headers.get("authorization", "")
    return given.startswith("Bearer ") and hmac.compare_digest(given[len("Bearer "):].encode(), token.encode())


def _status(error: RagfunnelError) -> int:
    if isinstance(error, Cancelled | BackendUnavailable | ModelError):  # the server keeps serving
        return 503
    if isinstance(error, InputError | ConfigError):
        return 422
    return 500


def _document(state: dict[str, Any], doc_id: str) -> Any:
    try:
        return state["documents"].get(doc_id)
    except KeyError:
        raise HTTPException(404, f"no document {doc_id!r}; store one with POST {API}/documents") from None


def _method(state: dict[str, Any], settings: Settings, body: AnswerIn) -> Any:
    """The method object for this request, built once per (method, index, options) and kept."""
    name = body.method or (DEFAULT_CORPUS_METHOD if body.index else DEFAULT_METHOD)
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}")
    fixed = sorted(OPERATOR_OPTIONS & set(body.options))
    if fixed:
        raise ConfigError(f"option {fixed[0]!r} is set by the server's operator, not per request")
    index = None if body.index is None else _index(state, body.index)
    options = {**body.options, "task": body.task}
    takes = set(options_of(name))
    options |= {role: spec for role, spec in (("light", settings.light), ("strong", settings.strong)) if role in takes}
    key = (name, body.index, json.dumps(options, sort_keys=True, default=str))
    cache: OrderedDict = state["methods"]
    if key not in cache:
        cache[key] = make_method(name, index=index, **options)
        while len(cache) > 32:
            cache.popitem(last=False)
    return cache[key]


def _stream(state: dict[str, Any], settings: Settings, work: Any, label: str, request: Request) -> StreamingResponse:
    """Server-sent events: ``token`` as the answering model writes, ``stage`` as each stage ends, then
    ``result`` (the whole answer) or ``error``. A client that goes away cancels its job."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def emit(kind: str, data: Any) -> None:  # from the worker thread
        loop.call_soon_threadsafe(events.put_nowait, (kind, data))

    job = state["jobs"].submit(work, label=label, on_text=lambda t: emit("token", {"text": t}),
                               on_stage=lambda stage: emit("stage", stage.to_dict()))

    async def finish() -> None:
        try:
            result = await state["jobs"].result(job, deadline=settings.deadline)
        except TimeoutError:
            await events.put(("error", {"status": 504, "detail": f"no answer within {settings.deadline:g} s"}))
        except RagfunnelError as e:
            await events.put(("error", {"status": _status(e), "detail": str(e)}))
        else:
            await events.put(("result", result))
        await events.put(("end", None))

    async def body() -> AsyncIterator[str]:
        waiter = asyncio.create_task(finish())
        try:
            while (event := await events.get())[0] != "end":
                yield f"event: {event[0]}\ndata: {json.dumps(event[1], ensure_ascii=False)}\n\n"
        finally:  # the client disconnected, or the stream ended
            if not job.future.done():
                job.cancel("the client disconnected")
            waiter.cancel()

    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


class _BodyLimit:
    """Refuse a request body over ``limit`` bytes with 413, whether or not it declares its length."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await _too_large(self.limit, send)
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await _too_large(self.limit, send)


class _TooLarge(Exception):
    pass


async def _too_large(limit: int, send: Any) -> None:
    response = JSONResponse({"detail": f"the request body is over the limit of {limit:,} bytes"}, status_code=413)
    await response({"type": "http"}, None, send)


def _with_inspector(app: FastAPI) -> FastAPI:
    static = Path(str(files("ragfunnel.serve") / "static"))
    app.mount("/", StaticFiles(directory=static, html=True), name="inspector")
    return app
