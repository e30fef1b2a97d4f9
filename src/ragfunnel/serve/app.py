"""The answering service: a versioned JSON API over the library, and the inspector at ``/``: its routes,
in groups, and the app assembled from them, the guard and the error handlers.

Models are loaded once, when the app starts, and stay warm (with the document states they keep); what the
running service holds is one typed :class:`~ragfunnel.serve.answering.ServiceState`, which each route gets
as a dependency (:data:`Service`). All model work goes through its one :class:`~ragfunnel.serve.jobs.JobQueue`.
Library errors map to HTTP statuses: bad input 422, an unknown document or index 404, a failing model or
server 503, a full queue 429 (with ``Retry-After``), a passed deadline 504, a stopping server 503. Every
request first passes :class:`~ragfunnel.serve.guards.Guard` (host, origin, token, body size; security headers).
A client sets only the options :mod:`ragfunnel.serve.options` lets it; models, files, indexes and URLs are the
operator's. A client that goes away cancels its job, streaming or not. Logs carry timings, never document text.

The work behind the routes lives beside this module: :mod:`~ragfunnel.serve.settings` (the operator's options),
:mod:`~ragfunnel.serve.request_bodies` (what a client may send), :mod:`~ragfunnel.serve.answering` (the state,
loading the models, answering and searching), :mod:`~ragfunnel.serve.job_responses` (a job's result, whole or
streamed) and :mod:`~ragfunnel.serve.wire` (browser-safe JSON, event frames, error bodies).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragfunnel.documents import LocatedContext
from ragfunnel.errors import RagfunnelError
from ragfunnel.methods import DEFAULT_CORPUS_METHOD, DEFAULT_METHOD, METHODS, described, method_kind
from ragfunnel.prompts import check_task
from ragfunnel.serve.answering import Loaded, ServiceState, answer_job, load, search_job
from ragfunnel.serve.documents import DocumentInUse, prefill
from ragfunnel.serve.guards import Guard
from ragfunnel.serve.index_routes import index_routes
from ragfunnel.serve.job_responses import outcome, stream
from ragfunnel.serve.jobs import Cancelled, Job, QueueFull
from ragfunnel.serve.openai_compat import (
    CHAT_PATH,
    ChatIn,
    ChunkWriter,
    answer_request,
    completion,
    method_of,
    model_ids,
)
from ragfunnel.serve.options import client_options, describe_errors, echoed
from ragfunnel.serve.request_bodies import UPLOAD_SCHEMA, AnswerIn, DocumentIn, SearchIn, json_body, receive_upload
from ragfunnel.serve.settings import API, Settings
from ragfunnel.serve.wire import BrowserSafeJSON, error_response, http_spelling, status_of

STATIC = Path(str(files("ragfunnel.serve") / "static"))
STARTED = int(time.time())


def service_state(request: Request) -> ServiceState:
    """The state of the service that got ``request``: set when the app starts, before any request is let in."""
    state: ServiceState | None = request.app.state.service
    if state is None:
        raise HTTPException(503, "the server is starting; send the request again in a few seconds")
    return state


Service = Annotated[ServiceState, Depends(service_state)]


def create_app(settings: Settings | None = None, *, loaded: Loaded | None = None) -> FastAPI:
    """The app. Without ``loaded``, the models load when it starts (``lifespan``); ``ragfunnel serve`` loads
    them first, so a bad model or index is one error line before anything listens. ``app.state.stop()``
    stops intake and answers every job at once (SIGTERM); it returns whether the worker thread has ended."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ready = loaded or await asyncio.to_thread(load, settings)
        app.state.service = ServiceState.started(settings, ready)
        yield
        app.state.service.jobs.close(wait=0.0)  # answers what is queued or running: shutdown does not wait

    app = FastAPI(title="ragfunnel", version="1", lifespan=lifespan, default_response_class=BrowserSafeJSON,
                  docs_url=None, redoc_url=None,  # their pages load scripts from a CDN; /docs is our own page
                  description="Answer questions over long texts: FB-RAG and its baselines.")
    app.state.service = None

    def stop(wait: float = 1.0) -> bool:
        state: ServiceState | None = app.state.service
        return True if state is None else state.jobs.close(wait=wait)

    app.state.stop = stop
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(Guard, token=settings.token, body_limit=settings.max_body_bytes,
                       allowed_hosts=settings.allowed_hosts, allowed_origins=settings.cors_origins)
    _handle_errors(app)
    for routes in (page_routes(), model_routes(), document_routes(), answer_routes(), search_routes(),
                   chat_routes(), index_routes()):
        app.include_router(routes)
    app.mount("/", StaticFiles(directory=STATIC, html=True), name="inspector")  # last: it answers every path
    return app


def _handle_errors(app: FastAPI) -> None:
    """Library errors, a full queue, HTTP errors and invalid bodies as one-line JSON errors."""

    @app.exception_handler(RagfunnelError)
    async def library_error(request: Request, error: RagfunnelError) -> JSONResponse:
        return error_response(request, status_of(error), error.spelled(http_spelling))

    @app.exception_handler(QueueFull)
    async def busy(request: Request, error: QueueFull) -> JSONResponse:
        return error_response(request, 429, str(error), headers={"Retry-After": str(error.retry_after)})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        detail = error.detail
        if error.status_code == 400 and detail == "There was an error parsing the body":  # FastAPI's own words
            detail = ("the request body could not be read as JSON (it is not UTF-8 text, nests too deeply, or "
                      "holds a number of over 4,300 digits); send one JSON object encoded as UTF-8")
        return error_response(request, error.status_code, detail, headers=error.headers)

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
        return error_response(request, 422, detail, extra={"errors": errors},
                              param=".".join(str(p) for p in first["loc"][1:]) or None)


def page_routes() -> APIRouter:
    """The API's own documentation page, and whether the service is up."""
    routes = APIRouter()

    @routes.get("/docs", include_in_schema=False)
    async def docs() -> FileResponse:
        return FileResponse(STATIC / "docs.html")

    @routes.get("/healthz")
    async def healthz(request: Request) -> dict[str, Any]:
        state: ServiceState | None = request.app.state.service
        return {"status": "ok" if state else "starting", "pending": state.jobs.pending if state else 0}

    @routes.get(f"{API}/jobs")
    async def jobs(state: Service) -> dict[str, Any]:
        """The queue's jobs, running first then waiting, each with its label (``read 2 uploaded files``,
        ``prefill ID``, an answer) and its progress: files read by OCR report ``{what, done, total}`` pages."""
        return {"jobs": state.jobs.statuses()}

    return routes


def model_routes() -> APIRouter:
    """What the service answers with: its models, and the methods with the options a request may set."""
    routes = APIRouter(prefix=API)

    @routes.get("/models")
    async def models(state: Service) -> dict[str, Any]:
        """The loaded models by role, and (``data``, OpenAI's list) the ``ragfunnel-METHOD`` chat models."""
        specs = {"light": state.settings.light, "strong": state.settings.strong}
        roles = {role: {"spec": specs[role], "name": llm.name, "fingerprint": llm.fingerprint,
                        "context_window": llm.context_window} for role, llm in state.models.items()}
        listed = [{"id": model, "object": "model", "created": STARTED, "owned_by": "ragfunnel"}
                  for model in model_ids(list(METHODS))]
        return {**roles, "object": "list", "data": listed}

    @routes.get("/methods")
    async def methods(state: Service) -> dict[str, Any]:
        return {"default": DEFAULT_METHOD, "default_over_an_index": DEFAULT_CORPUS_METHOD,
                "methods": {name: client_options(name) for name in METHODS},
                "descriptions": {name: described(name) for name in METHODS},
                "kinds": {name: method_kind(name) for name in METHODS}, "indexes": sorted(state.indexes)}

    return routes


def document_routes() -> APIRouter:
    """Stored documents: added as JSON text or uploaded files, listed, read back, removed."""
    routes = APIRouter(prefix=API)

    @routes.post("/documents", status_code=201, openapi_extra=UPLOAD_SCHEMA, response_model=None)
    async def add_document(request: Request, state: Service) -> Any:
        """Store a document: JSON ``{text, name, task}``, or a multipart upload of files (``file`` fields: any
        format ``ragfunnel read`` reads; scans and images by OCR) read as one document with their pages, chapters,
        sheets, rows and slides. An upload sent with ``Accept: text/event-stream`` is answered by server-sent
        events: ``progress`` as its files are read (OCR, a page at a time), then ``result`` (the stored
        document) or ``error``."""
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            settings = state.settings
            upload = await receive_upload(request, max_bytes=settings.max_body_bytes)
            check_task(upload.task)

            def read_and_store(job: Job) -> dict[str, Any]:
                located = upload.read(settings.upload_limits())
                return _stored(state, located.text, upload.label(located), upload.task, located)

            label = f"read {len(upload.files)} uploaded files"
            if "text/event-stream" in request.headers.get("accept", ""):
                return stream(state.jobs, read_and_store, label, request, deadline=settings.deadline)
            return await outcome(state.jobs, state.jobs.submit(read_and_store, label=label), request,
                                 deadline=settings.deadline)
        body = json_body(DocumentIn, await request.body())
        check_task(body.task)
        return _stored(state, body.text, body.name, body.task, None)

    @routes.get("/documents")
    async def list_documents(state: Service) -> list[dict[str, Any]]:
        return [d.summary() for d in state.documents.all()]

    @routes.get("/documents/{doc_id}")
    async def get_document(doc_id: str, state: Service) -> dict[str, Any]:
        doc = state.document(doc_id)
        return {**doc.summary(), "text": doc.text}

    @routes.get("/documents/{doc_id}/text")
    async def get_document_text(doc_id: str, state: Service) -> dict[str, Any]:
        """What each of the document's files was read as (``ragfunnel read --json``): its text, the map of its
        pages, chapters, sheets, rows and slides (with OCR's confidence per line), and the readers' warnings."""
        doc = state.document(doc_id)
        return {"id": doc.id, "name": doc.name, "files": [d.to_dict() for d in doc.located.documents]}

    @routes.delete("/documents/{doc_id}", status_code=204, response_class=Response,
                   responses={404: {"description": "No stored document has this id."},
                              409: {"description": "An answer is reading the document now; remove it once the "
                                                   "answer has ended."}})
    async def remove_document(doc_id: str, request: Request, state: Service) -> Response:
        """Remove a stored document: 204. While an answer reads it, 409 and the document stays (the answer
        ends normally); an answer queued before the removal still reads the text it was given."""
        try:
            state.remove_document(doc_id)
        except DocumentInUse as e:
            return error_response(request, 409, str(e))
        return Response(status_code=204)

    return routes


def _stored(state: ServiceState, text: str, name: str, task: str, located: LocatedContext | None) -> dict[str, Any]:
    """Store a document (read from ``located``'s files, if given) and queue its prefill; its summary."""
    doc, new = state.documents.add(text, name, located)
    if new and state.settings.prefill:
        doc.prefill.update({"light": "queued", "strong": "queued"})
        try:
            state.jobs.submit(lambda job: prefill(doc, state.light, state.strong, task=task), label=f"prefill {doc.id}")
        except (QueueFull, Cancelled) as e:
            why = "the server was busy" if isinstance(e, QueueFull) else "the server is stopping"
            doc.prefill.update({"light": f"skipped: {why}", "strong": f"skipped: {why}"})
    return doc.summary()


def answer_routes() -> APIRouter:
    """A question answered over a stored document, a text or an index: whole, or streamed."""
    routes = APIRouter(prefix=API)

    @routes.post("/answer", response_model=None)
    async def answer(body: AnswerIn, request: Request, state: Service) -> Any:
        label, work = answer_job(state, body)
        deadline = state.settings.deadline
        if not body.stream:
            return await outcome(state.jobs, state.jobs.submit(work, label=label), request, deadline=deadline)
        return stream(state.jobs, work, label, request, deadline=deadline)

    return routes


def search_routes() -> APIRouter:
    """The passages of one of the operator's indexes for a question."""
    routes = APIRouter(prefix=API)

    @routes.post("/search", response_model=None)
    async def search(body: SearchIn, request: Request, state: Service) -> Any:
        label, work = search_job(state, body)
        job = state.jobs.submit(work, label=label)
        return await outcome(state.jobs, job, request, deadline=state.settings.deadline)

    return routes


def chat_routes() -> APIRouter:
    """OpenAI's chat completions over the same answers."""
    routes = APIRouter()

    @routes.post(CHAT_PATH, response_model=None, openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": ChatIn.model_json_schema()}}}})
    async def chat(request: Request, state: Service) -> Any:
        """OpenAI's chat completions: ``model`` is ``ragfunnel-METHOD`` (GET /v1/models lists them)."""
        body = json_body(ChatIn, await request.body())
        method = method_of(body.model, list(METHODS))
        if method is None:
            raise HTTPException(404, f"unknown model {echoed(body.model)}; models are "
                                     f"{', '.join(model_ids(list(METHODS)))}")
        answer_in = json_body(AnswerIn, json.dumps(answer_request(body, method)).encode())
        label, work = answer_job(state, answer_in)
        deadline = state.settings.deadline
        if not body.stream:
            result = await outcome(state.jobs, state.jobs.submit(work, label=label), request, deadline=deadline)
            return result if isinstance(result, Response) else BrowserSafeJSON(completion(result, body.model))
        writer = ChunkWriter(body.model, include_usage=bool(body.stream_options and body.stream_options.include_usage))
        return stream(state.jobs, work, label, request, deadline=deadline, frame=writer.frame)

    return routes
