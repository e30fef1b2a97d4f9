"""The answering service: a versioned JSON API over the library, and the inspector at ``/``.

Models are loaded once, when the app starts, and stay warm (with the document states they keep).
All model work goes through one :class:`~ragfunnel.serve.jobs.JobQueue`. Library errors map to HTTP
statuses: bad input 422, an unknown document or index 404, a failing model or server 503, a full
queue 429 (with ``Retry-After``), a passed deadline 504, a stopping server 503. Every request first passes
:class:`~ragfunnel.serve.guards.Guard` (host, origin, token, body size; security headers). A client sets
only the options :mod:`ragfunnel.serve.options` lets it; models, files, indexes and URLs are the operator's.
A client that goes away cancels its job, streaming or not. Logs carry timings, never document text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile as StarletteUpload
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragfunnel.api import answer_located
from ragfunnel.documents import LocatedContext, ReadLimits, read_context
from ragfunnel.documents.limits import MB
from ragfunnel.errors import BackendUnavailable, ConfigError, InputError, ModelError, RagfunnelError
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, resolve
from ragfunnel.methods import (
    DEFAULT_CORPUS_METHOD,
    DEFAULT_METHOD,
    METHODS,
    check_source,
    make_method,
    method_kind,
    options_of,
)
from ragfunnel.prompts import check_task
from ragfunnel.retrieve.rerank import DEFAULT_PRE_RANKER
from ragfunnel.serve.documents import DocumentStore, chunk_view, citations_view, prefill
from ragfunnel.serve.guards import Guard
from ragfunnel.serve.jobs import Cancelled, Job, JobQueue, QueueFull
from ragfunnel.serve.openai_compat import (
    CHAT_PATH,
    ChatIn,
    ChunkWriter,
    answer_request,
    completion,
    error_body,
    method_of,
    model_ids,
)
from ragfunnel.serve.options import checked_options, client_options, describe_errors
from ragfunnel.text import check_context
from ragfunnel.text.hygiene import clean_text, replace_lone_surrogates
from ragfunnel.types import on_stage

log = logging.getLogger("ragfunnel.serve")

API = "/v1"
QUESTION_CHARS = 20_000  # a question longer than this is a document sent in the wrong field
STATIC = Path(str(files("ragfunnel.serve") / "static"))
STARTED = int(time.time())


def _clean(value: Any) -> Any:
    return clean_text(value, source="a request's text") if isinstance(value, str) else value


def _clean_all(value: Any) -> Any:
    return replace_lone_surrogates(value)[0]


# Request text with lone surrogates (JSON's "\ud800") replaced by U+FFFD before anything hashes or stores it.
Text = Annotated[str, BeforeValidator(_clean)]
def _question_size(question: str) -> str:
    if len(question) > QUESTION_CHARS:
        raise ValueError(f"the question is {len(question):,} characters, over the limit of {QUESTION_CHARS:,}; "
                         "send long text as the document (text or document_id) and ask about it")
    return question


Question = Annotated[str, BeforeValidator(_clean), AfterValidator(_question_size),
                     Field(description=f"At most {QUESTION_CHARS:,} characters.")]


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
    allowed_hosts: list[str] = field(default_factory=list)  # beyond loopback; "*" for any (needs a token)
    documents: int = 64
    prefill: bool = True
    indexes: dict[str, str] = field(default_factory=dict)  # name -> directory, for search and corpus methods
    pre_ranker: str = DEFAULT_PRE_RANKER
    post_ranker: str = DEFAULT_LIGHT

    def operator_options(self) -> dict[str, str]:
        """The options only the operator sets, as this server sets them."""
        return {"light": self.light, "strong": self.strong, "pre_ranker": self.pre_ranker,
                "post_ranker": self.post_ranker}


@dataclass
class Loaded:
    """What the service loads before it answers: the two models, warm, and the operator's indexes."""

    light: Any
    strong: Any
    indexes: dict[str, Any]


def load(settings: Settings) -> Loaded:
    """Resolve and warm the models and open the indexes; a bad spec, file or index raises here, in one line."""
    started = time.perf_counter()
    light, strong = resolve(settings.light), resolve(settings.strong)
    for model in dict.fromkeys([light, strong]):
        _warm_up(model)
    indexes = {name: _open_index(path) for name, path in settings.indexes.items()}
    log.info("models ready in %.1fs: light %s, strong %s", time.perf_counter() - started, light.name, strong.name)
    return Loaded(light, strong, indexes)


class DocumentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: Text = Field(description="The document's text (UTF-8).")
    name: Text = Field("", max_length=1000, description="A label to show for it.")
    task: str = Field("qa", max_length=100, description="The prompt family its questions will use (the models "
                                                        "read it so).")


class AnswerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: Question
    document_id: str | None = Field(None, max_length=100, description="A stored document (POST /v1/documents) ...")
    text: Text | None = Field(None, description="... or the text itself ...")
    index: str | None = Field(None, max_length=200, description="... or an index the server was started with "
                                                                "(corpus methods).")
    method: str | None = Field(None, max_length=100, description="Default: auto over a text, funnel over an index.")
    options: Annotated[dict[str, Any], BeforeValidator(_clean_all)] = Field(
        default_factory=dict, description="The method's options, e.g. budget (GET /v1/methods lists them).")
    choices: list[Annotated[Text, Field(max_length=10_000)]] | None = Field(None, max_length=100)
    task: str = Field("qa", max_length=100)
    stream: bool = Field(False, description="Server-sent events: token, stage and result (or error).")


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: str = Field(max_length=200, description="An index the server was started with (--index NAME=DIR).")
    question: Question
    top_k: int = Field(4, ge=1, le=100)
    funnel: bool = Field(True, description="FunnelRAG's three stages, or flat dense retrieval (index --flat).")


def create_app(settings: Settings | None = None, *, loaded: Loaded | None = None) -> FastAPI:
    """The app. Without ``loaded``, the models load when it starts (``lifespan``); ``ragfunnel serve`` loads
    them first, so a bad model or index is one error line before anything listens. ``app.state.stop()``
    stops intake and answers every job at once (SIGTERM); it returns whether the worker thread has ended."""
    settings = settings or Settings()
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ready = loaded or await asyncio.to_thread(load, settings)
        state["models"] = {"light": ready.light, "strong": ready.strong}
        state["jobs"] = JobQueue([ready.light, ready.strong], capacity=settings.queue, streaming=ready.strong)
        state["documents"] = DocumentStore(settings.documents)
        state["methods"] = OrderedDict()
        state["indexes"] = ready.indexes
        state["retrievers"] = {}  # FunnelRAG's search, per index
        state["rankers"] = {}  # per index, loaded by the first search or funnel answer over it
        yield
        state["jobs"].close(wait=0.0)  # answers what is queued or running: shutdown does not wait for a generation

    app = FastAPI(title="ragfunnel", version="1", lifespan=lifespan, default_response_class=BrowserSafeJSON,
                  docs_url=None, redoc_url=None,  # their pages load scripts from a CDN; /docs is our own page
                  description="Answer questions over long texts: FB-RAG and its baselines.")
    app.state.stop = lambda wait=1.0: state["jobs"].close(wait=wait) if "jobs" in state else True
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(Guard, token=settings.token, body_limit=settings.max_body_bytes,
                       allowed_hosts=settings.allowed_hosts, allowed_origins=settings.cors_origins)

    @app.exception_handler(RagfunnelError)
    async def library_error(request: Request, error: RagfunnelError) -> JSONResponse:
        return _error(request, _status(error), str(error))

    @app.exception_handler(QueueFull)
    async def busy(request: Request, error: QueueFull) -> JSONResponse:
        return _error(request, 429, str(error), headers={"Retry-After": str(error.retry_after)})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        detail = error.detail
        if error.status_code == 400 and detail == "There was an error parsing the body":  # FastAPI's own words
            detail = ("the request body could not be read as JSON (it is not UTF-8 text, or nests too deeply); "
                      "send one JSON object encoded as UTF-8")
        return _error(request, error.status_code, detail, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        """One line naming the first bad field, and every complaint without the input echoed back."""
        errors = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in error.errors()]
        first = error.errors()[0]
        if first["type"] == "json_invalid":
            detail = (f"the request body is not valid JSON ({first.get('ctx', {}).get('error', 'malformed')} at "
                      f"character {first['loc'][-1]}); send one JSON object")
        else:
            detail = describe_errors(error.errors())
        return _error(request, 422, detail, extra={"errors": errors},
                      param=".".join(str(p) for p in first["loc"][1:]) or None)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> FileResponse:
        return FileResponse(STATIC / "docs.html")

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        jobs = state.get("jobs")
        return {"status": "ok" if jobs else "starting", "pending": jobs.pending if jobs else 0}

    @app.get(f"{API}/models")
    async def models() -> dict[str, Any]:
        """The loaded models by role, and (``data``, OpenAI's list) the ``ragfunnel-METHOD`` chat models."""
        roles = {role: {"spec": spec, "name": llm.name, "fingerprint": llm.fingerprint,
                        "context_window": llm.context_window}
                 for (role, llm), spec in zip(state["models"].items(), (settings.light, settings.strong), strict=True)}
        listed = [{"id": model, "object": "model", "created": STARTED, "owned_by": "ragfunnel"}
                  for model in model_ids(list(METHODS))]
        return {**roles, "object": "list", "data": listed}

    @app.get(f"{API}/methods")
    async def methods() -> dict[str, Any]:
        return {"default": DEFAULT_METHOD, "default_over_an_index": DEFAULT_CORPUS_METHOD,
                "methods": {name: client_options(name) for name in METHODS},
                "kinds": {name: method_kind(name) for name in METHODS}, "indexes": sorted(state["indexes"])}

    @app.post(f"{API}/search", response_model=None)
    async def search(body: SearchIn, request: Request) -> Any:
        _index(state, body.index)

        def work(job: Job) -> dict[str, Any]:
            return _search(_retriever(state, settings, body.index), body)

        job = state["jobs"].submit(work, label=f"search {body.index}")
        return await _outcome(state, settings, job, request)

    @app.post(f"{API}/documents", status_code=201, openapi_extra=UPLOAD_SCHEMA)
    async def add_document(request: Request) -> dict[str, Any]:
        """Store a document: JSON ``{text, name, task}``, or a multipart upload of files (``file`` fields:
        PDF, DOCX, EPUB, HTML, Markdown, text) read as one document with their pages and chapters."""
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            text, name, task, located = await _uploaded(request, settings)
        else:
            body = _json_body(DocumentIn, await request.body())
            text, name, task, located = body.text, body.name, body.task, None
        check_task(task)
        doc, new = state["documents"].add(text, name, located)
        if new and settings.prefill:
            doc.prefill.update({"light": "queued", "strong": "queued"})
            try:
                state["jobs"].submit(lambda job: prefill(doc, **state["models"], task=task),
                                     label=f"prefill {doc.id}")
            except (QueueFull, Cancelled) as e:
                why = "the server was busy" if isinstance(e, QueueFull) else "the server is stopping"
                doc.prefill.update({"light": f"skipped: {why}", "strong": f"skipped: {why}"})
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
        label, work = _answer_job(state, settings, body)
        if not body.stream:
            return await _outcome(state, settings, state["jobs"].submit(work, label=label), request)
        return _stream(state, settings, work, label, request)

    @app.post(CHAT_PATH, response_model=None, openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": ChatIn.model_json_schema()}}}})
    async def chat(request: Request) -> Any:
        """OpenAI's chat completions: ``model`` is ``ragfunnel-METHOD`` (GET /v1/models lists them)."""
        body = _json_body(ChatIn, await request.body())
        method = method_of(body.model, list(METHODS))
        if method is None:
            raise HTTPException(404, f"unknown model {body.model!r}; models are {', '.join(model_ids(list(METHODS)))}")
        answer_in = _json_body(AnswerIn, json.dumps(answer_request(body, method)).encode())
        label, work = _answer_job(state, settings, answer_in)
        if not body.stream:
            result = await _outcome(state, settings, state["jobs"].submit(work, label=label), request)
            return result if isinstance(result, Response) else BrowserSafeJSON(completion(result, body.model))
        writer = ChunkWriter(body.model, include_usage=bool(body.stream_options and body.stream_options.include_usage))
        return _stream(state, settings, work, label, request, frame=writer.frame)

    return _with_inspector(app)


class BrowserSafeJSON(JSONResponse):
    """JSON with U+2028 and U+2029 escaped: legal in JSON, but line ends to JavaScript's line-based parsing."""

    def render(self, content: Any) -> bytes:
        return browser_safe(json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))).encode()


def browser_safe(text: str) -> str:
    """``text`` as it may go to a browser: U+2028/U+2029 escaped, and any lone surrogate that slipped past the
    entry checks (in a message quoting input) replaced, so encoding it can never fail."""
    return replace_lone_surrogates(text)[0].replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


async def _outcome(state: dict[str, Any], settings: Settings, job: Job, request: Request) -> Any:
    """``job``'s result; 504 past the deadline. A client that disconnects first cancels the job."""
    result = asyncio.ensure_future(state["jobs"].result(job, deadline=settings.deadline))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({result, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not result.done():  # the client went away: cancelling the wait cancels the job
        result.cancel()
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it
    try:
        return result.result()
    except TimeoutError:
        raise HTTPException(504, f"no result within the deadline of {settings.deadline:g} s") from None
    except (RagfunnelError, StarletteHTTPException):
        raise
    except Exception as e:  # a bug: one JSON line for the client, one log line to report, the server goes on
        return BrowserSafeJSON({"detail": _unexpected(job.label, e)}, status_code=500)


def _unexpected(label: str, error: Exception) -> str:
    log.error("%s failed: unexpected %s: %s", label, type(error).__name__, error)
    return f"{label} failed: unexpected {type(error).__name__}: {error}; this is a bug in ragfunnel, please report it"


async def _disconnected(request: Request) -> None:
    """Return when the client disconnects (the body is read already, so the next message is that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _index(state: dict[str, Any], name: str) -> Any:
    if name not in state["indexes"]:
        raise HTTPException(404, f"no index {name!r}; this server has: "
                                 f"{', '.join(sorted(state['indexes'])) or 'none (start it with --index NAME=DIR)'}")
    return state["indexes"][name]


def _open_index(path: str) -> Any:
    from ragfunnel.corpus.index import CorpusIndex

    return CorpusIndex(path)


def _retriever(state: dict[str, Any], settings: Settings, name: str) -> Any:
    """FunnelRAG's retriever over index ``name``, for search; kept, with the rankers the funnel method uses."""
    from ragfunnel.corpus.funnel import FunnelRetriever

    if name not in state["retrievers"]:
        state["retrievers"][name] = FunnelRetriever(state["indexes"][name], **_rankers(state, settings, name))
    return state["retrievers"][name]


def _search(retriever: Any, body: SearchIn) -> dict[str, Any]:
    from ragfunnel.corpus.funnel import flat_search
    from ragfunnel.methods.base import check_question

    question = check_question(body.question)
    if not body.funnel:
        return flat_search(retriever.index, question, body.top_k).to_dict()
    retriever.top_passages = body.top_k
    return retriever.search(question).to_dict()


UPLOAD_FIELD = "file"
UPLOAD_FILES = 20  # files in one upload
UPLOAD_SCHEMA = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": DocumentIn.model_json_schema()},
    "multipart/form-data": {"schema": {"type": "object", "required": [UPLOAD_FIELD], "properties": {
        UPLOAD_FIELD: {"type": "array", "items": {"type": "string", "format": "binary"}, "maxItems": UPLOAD_FILES},
        "name": {"type": "string", "maxLength": 1000}, "task": {"type": "string", "maxLength": 100}}}}}}}


def _answer_job(state: dict[str, Any], settings: Settings, body: AnswerIn) -> tuple[str, Any]:
    """The label and work of one answer (``/v1/answer`` and ``/v1/chat/completions``), checked before it is
    queued: everything a request can get wrong is refused here."""
    if sum(x is not None for x in (body.document_id, body.text, body.index)) != 1:
        raise InputError("pass exactly one of document_id (a stored document), text, and index")
    if body.document_id is not None:
        located = _document(state, body.document_id).located
    else:
        located = None if body.text is None else LocatedContext.of_text(check_context(body.text), name="text")
    name, options = _checked_method(state, settings, body)
    label = f"{name} answer"

    def work(job: Job) -> dict[str, Any]:
        started = time.perf_counter()
        method = _built_method(state, settings, name, body.index, options)
        with on_stage(job.on_stage or (lambda stage: None)):
            if located is None:  # a corpus method over one of the server's indexes
                prediction = method.run(body.question, choices=body.choices)
            else:
                prediction = answer_located(method, body.question, located, choices=body.choices)
        job.check()
        log.info("%s: %.1fs, %d input tokens, question %d chars, document %d chars", label,
                 time.perf_counter() - started, prediction.trace.input_tokens, len(body.question),
                 len(located.text) if located else 0)
        if located is None:
            return prediction.to_dict()
        return {**prediction.to_dict(), "citations": citations_view(located, prediction),
                "chunks": chunk_view(located, prediction, question=body.question,
                                     chunk_words_=body.options.get("chunk_words"))}

    return label, work


def _json_body(model: type[BaseModel], raw: bytes) -> Any:
    """``raw`` parsed and validated as FastAPI does for a declared body, with the same error shapes."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": e.msg}}]) from None
    except UnicodeDecodeError:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", 0), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": "not UTF-8"}}]) from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise RequestValidationError([{**err, "loc": ("body", *err["loc"])}
                                      for err in e.errors(include_url=False)]) from None


async def _uploaded(request: Request, settings: Settings) -> tuple[str, str, str, LocatedContext]:
    """The files of a multipart upload read as one document: (text, name, task, located). Each file is
    written under a fresh temporary folder by its base name only, so a client never names a server path."""
    # Too many files or fields, or a malformed body: Starlette answers 400 with the reason.
    form = await request.form(max_files=UPLOAD_FILES, max_fields=10, max_part_size=settings.max_body_bytes)
    uploads = [v for k, v in form.multi_items() if k == UPLOAD_FIELD and isinstance(v, StarletteUpload)]
    if not uploads:
        raise InputError(f"the upload holds no files; send each as a multipart field named {UPLOAD_FIELD!r}")
    name, task = str(form.get("name") or ""), str(form.get("task") or "qa")
    limits = ReadLimits(max_document_mb=settings.max_body_bytes / MB)
    with tempfile.TemporaryDirectory(prefix="ragfunnel-upload-") as folder:
        paths = []
        for i, upload in enumerate(uploads):
            base = Path(upload.filename or "").name.strip() or f"upload-{i + 1}"
            path = Path(folder) / f"{i:02d}" / base
            path.parent.mkdir()
            path.write_bytes(await upload.read())
            paths.append(path)
        try:
            located = await run_in_threadpool(read_context, paths, limits)
        except RagfunnelError:
            raise
        except Exception as e:  # a reader library tripped on hostile bytes: the client's file, not a server fault
            log.warning("an upload could not be read: %s: %s", type(e).__name__, e)
            raise InputError(f"the uploaded files could not be read ({type(e).__name__}); check that each is a "
                             "valid PDF, DOCX, EPUB, HTML, Markdown or text file") from None
    return located.text, name or ", ".join(d.name for d in located.documents), task, located


def _warm_up(model: Any) -> None:
    warm = getattr(model, "warm_up", None)
    if warm is not None:
        warm()


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


def _checked_method(state: dict[str, Any], settings: Settings, body: AnswerIn) -> tuple[str, dict[str, Any]]:
    """The method's name and options for this request, checked at once (everything a request can get wrong);
    the options include the operator's models, by spec."""
    default = DEFAULT_CORPUS_METHOD if body.index is not None else DEFAULT_METHOD
    name = body.method if body.method is not None else default
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}")
    options = {**checked_options(name, body.options), "task": check_task(body.task)}
    check_source(name, index=None if body.index is None else _index(state, body.index))
    takes = set(options_of(name, over_index=body.index is not None))
    return name, options | {option: spec for option, spec in settings.operator_options().items() if option in takes}


def _built_method(state: dict[str, Any], settings: Settings, name: str, index: str | None,
                  options: dict[str, Any]) -> Any:
    """The method object, built on the worker (building one may load a model) once per (method, index,
    options) and kept. A corpus method shares its index's rankers with search: loaded once, not per options."""
    key = (name, index, json.dumps(options, sort_keys=True, default=str))
    cache: OrderedDict = state["methods"]
    if key not in cache:
        if index is not None:
            options = {**options, **{k: v for k, v in _rankers(state, settings, index).items() if k in options}}
        cache[key] = make_method(name, index=None if index is None else state["indexes"][index], **options)
        while len(cache) > 32:
            cache.popitem(last=False)
    return cache[key]


def _rankers(state: dict[str, Any], settings: Settings, name: str) -> dict[str, Any]:
    """FunnelRAG's stage 2 and 3 rankers over index ``name`` (the operator's), loaded on first use."""
    from ragfunnel.retrieve.attention import load_post_ranker
    from ragfunnel.retrieve.rerank import load_pre_ranker

    if name not in state["rankers"]:
        index = state["indexes"][name]
        state["rankers"][name] = {
            "pre_ranker": load_pre_ranker(settings.pre_ranker, stored=index.document_vectors, embedder=index.embedder),
            "post_ranker": load_post_ranker(settings.post_ranker)}
    return state["rankers"][name]


def _event_frame(kind: str, data: Any) -> str:
    return f"event: {kind}\ndata: {browser_safe(json.dumps(data, ensure_ascii=False))}\n\n"


def _stream(state: dict[str, Any], settings: Settings, work: Any, label: str, request: Request,
            frame: Any = _event_frame) -> StreamingResponse:
    """Server-sent events: ``token`` as the answering model writes, ``stage`` as each stage ends, then
    ``result`` (the whole answer) or ``error``, each written by ``frame(kind, data)`` (ragfunnel's own
    events, or OpenAI's chunks). A client that goes away cancels its job."""
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
        except Exception as e:  # a bug: the client still gets an answer, the log one line to report
            await events.put(("error", {"status": 500, "detail": _unexpected(label, e)}))
        else:
            await events.put(("result", result))
        finally:
            await events.put(("end", None))

    async def body() -> AsyncIterator[str]:
        waiter = asyncio.create_task(finish())
        try:
            while (event := await events.get())[0] != "end":
                text = frame(*event)
                if text:
                    yield text
        finally:  # the client disconnected, or the stream ended
            if not job.future.done():
                job.cancel("the client disconnected")
            waiter.cancel()

    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _error(request: Request, status: int, detail: str, *, headers: dict[str, str] | None = None,
           extra: dict[str, Any] | None = None, param: str | None = None) -> JSONResponse:
    """``{"detail": ...}``, or on the OpenAI endpoint OpenAI's error object (a bad request is 400 there)."""
    if request.url.path == CHAT_PATH:
        status = 400 if status == 422 else status
        return BrowserSafeJSON(error_body(status, detail, param=param), status_code=status, headers=headers)
    return BrowserSafeJSON({"detail": detail, **(extra or {})}, status_code=status, headers=headers)


def _with_inspector(app: FastAPI) -> FastAPI:
    app.mount("/", StaticFiles(directory=STATIC, html=True), name="inspector")
    return app
