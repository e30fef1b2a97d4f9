"""``ragfunnel mcp``: ragfunnel's answers as Model Context Protocol tools, on the official ``mcp`` SDK.

Tools: ``answer`` (a question over a file under the root, a text, or a stored document: the answer, its
confidence and citations), ``search`` (an index's passages), ``add_document`` (read a file or folder under the
root once, keep it by id), ``list_documents`` and ``remove_document`` (refused while an answer reads it), and
``list_indexes`` (the indexes ``search`` takes by name, as ``GET /v1/indexes`` describes them).
Every path a client names must resolve, symlinks followed, inside ``--root``. Over stdio (the default) or
streamable HTTP on the loopback (``--http``, at ``/v1/mcp``, behind the same host, origin and token checks as
``serve``).

The tools are adapters over the service's :class:`~ragfunnel.serve.answering.ServiceState`: answers and searches
run as jobs of its queue (one generation at a time, bounded, each with a deadline; a client that cancels its call
cancels the job), an answer's method and options pass :func:`~ragfunnel.serve.answering.checked_method` as
``/v1/answer``'s do and its method is the state's kept one for (method, options), and documents are kept in its
store. What is MCP's own stays here: the root every path must resolve inside, and searching an index folder by
path. The ``answer`` tool's ``options`` schema is generated from the methods' configurations. The state is made
by the first tool call that needs it and the models load in the first answer's job, so a host lists the tools at
once.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, WithJsonSchema

from ragfunnel.api import search as ragfunnel_search
from ragfunnel.documents import LocatedContext, ReadLimits, read_context, resolved
from ragfunnel.errors import InputError, RagfunnelError
from ragfunnel.methods import CONTEXT_METHODS, DEFAULT_METHOD, described
from ragfunnel.methods.base import check_question
from ragfunnel.serve.answering import ServiceState, checked_method
from ragfunnel.serve.jobs import Job, QueueFull
from ragfunnel.serve.mcp_stdio import run_stdio
from ragfunnel.serve.options import client_model, echoed
from ragfunnel.serve.settings import SEARCH_TOP_K, Settings, check_question_size
from ragfunnel.serve.watching import index_views
from ragfunnel.source import Source
from ragfunnel.text import check_context
from ragfunnel.types import Prediction, StageTrace
from ragfunnel.version import __version__

MCP_PATH = "/v1/mcp"
SOURCE_REFUSAL = "pass exactly one of path, text and document_id"


@dataclass
class ToolState:
    """What the tools share: the root, the operator's indexes (folders the search tool takes by name), and the
    service made from the operator's ``settings`` (its models, kept methods, document store and the job queue
    every answer and search runs through: ``settings.queue`` jobs at most, each within ``settings.deadline``
    seconds)."""

    root: Path
    settings: Settings = field(default_factory=Settings)
    indexes: dict[str, Path] = field(default_factory=dict)
    _service: ServiceState | None = field(default=None, init=False, repr=False)
    _making: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def service(self) -> ServiceState:
        """The service, made by the first tool call that needs it, so a session that only lists the tools starts
        no worker; it loads each model in the first job that uses it."""
        with self._making:  # add_document reads on a thread of its own
            if self._service is None:
                self._service = ServiceState.on_demand(self.settings)
            return self._service

    def inside(self, given: str) -> Path:
        """``given`` (relative to the root, or absolute) if it resolves inside the root; refused otherwise."""
        if not given:
            raise InputError("path is empty; name a file or folder under the root")
        if "\x00" in given:
            raise InputError(f"path {echoed(given)} holds a NUL character, which no file name can; name a file or "
                             "folder under the root")
        path = Path(given) if Path(given).is_absolute() else self.root / given
        try:
            missing = not path.is_symlink() and not path.exists()
        except OSError as e:  # a name longer than the file system takes, a file used as a folder ...
            raise InputError(f"{echoed(given)} cannot be read ({e.strerror}); name a file or folder under the "
                             "root") from None
        if missing:
            raise InputError(f"{echoed(given)} does not exist under the root {self.root}")
        real = resolved(path)  # a symlink loop is one line, not a traceback
        if not real.is_relative_to(self.root):
            raise InputError(f"{echoed(given)} is outside the root this server reads ({self.root}); "
                             "pass a path under it, or restart the server with another root directory")
        return real

    def read(self, path: str) -> LocatedContext:
        """A file or folder under the root; a folder's walk skips every entry that resolves outside it."""
        return self.read_inside([self.inside(path)])

    def read_inside(self, reals: list[Path]) -> LocatedContext:
        """Files and folders :meth:`inside` returned, as one context."""
        return read_context(reals, self.settings.read_limits, root=self.root)

    def add(self, path: str) -> tuple[str, LocatedContext]:
        """Read ``path`` and keep it: its document id, and what was read."""
        located = self.read(path)
        doc, _ = self.service().documents.add(located.text, path, located)
        return doc.id, located

    def remove(self, document_id: str) -> None:
        """Remove a stored document; refused if there is none, or while an answer reads it."""
        try:
            self.service().documents.remove(document_id)
        except KeyError:
            raise InputError(f"no document {echoed(document_id)}; list_documents lists the stored ones") from None

    def reading(self, source: Source) -> Callable[[], AbstractContextManager[LocatedContext]]:
        """What an answer reads, checked now, as the job that answers opens it: files under the root are read
        then, and a stored document is held (not removed) until the answer ends."""
        if source.files is not None:
            reals = [self.inside(path) for path in source.files]
            return lambda: nullcontext(self.read_inside(reals))
        if source.context is not None:
            located = LocatedContext.of_text(check_context(source.context))
            return lambda: nullcontext(located)
        documents = self.service().documents
        try:
            doc = documents.get(str(source.document))
        except KeyError:
            raise InputError(f"no document {echoed(source.document)}; add one with add_document") from None

        @contextmanager
        def held() -> Iterator[LocatedContext]:
            with documents.reading(doc):
                yield doc.located  # type: ignore[misc]  # a stored Document always has its located text

        return held

    async def run(self, work: Callable[[Job], Any], *, label: str,
                  on_stage: Callable[[StageTrace], None] | None = None) -> Any:
        """``work`` as a job of the queue, and its result; a full queue or a passed deadline is an error
        for the client, and a call the client cancels cancels the job."""
        jobs, deadline = self.service().jobs, self.settings.deadline
        try:
            job = jobs.submit(work, label=label, on_stage=on_stage)
            return await jobs.result(job, deadline=deadline)
        except QueueFull as e:
            raise ToolError(str(e)) from None
        except TimeoutError:
            raise ToolError(f"{label}: no result within the deadline of {deadline:g} s") from None

    def close(self) -> None:
        """Answer every job at once (Cancelled) and let the worker go: the server has stopped."""
        if self._service is not None:
            self._service.jobs.close(wait=0.0)


def answer_options(method: str | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The ``answer`` tool's method and options, checked as ``/v1/answer`` checks a request's."""
    name = method or DEFAULT_METHOD
    if name not in CONTEXT_METHODS:
        raise InputError(f"unknown method {echoed(name)} for a document; use one of {', '.join(CONTEXT_METHODS)}")
    return checked_method(name, dict(options or {}))


def options_schema() -> dict[str, Any]:
    """The JSON schema of the answer tool's ``options``: every option a request may set for a method that reads
    a document, with its type, bounds and help from the method's configuration (the chosen method's own check
    runs when the tool is called; a default that differs between methods is in the help)."""
    properties: dict[str, Any] = {}
    for name in CONTEXT_METHODS:
        for option_name, schema in client_model(name).model_json_schema().get("properties", {}).items():
            properties.setdefault(option_name, {k: v for k, v in schema.items() if k != "default"})
    return {"type": "object", "properties": dict(sorted(properties.items())), "additionalProperties": False,
            "description": "The method's options (GET /v1/methods in `ragfunnel serve` lists each method's)."}


SENT_AS = {"context": "path, text or document_id"}  # library options the tools take as arguments of other names


def tool_spelling(own: set[str], every: set[str]) -> Callable[[str], str]:
    """How an option named in an error of a tool is written for an MCP client: an argument of the tool (``own``)
    or of another tool (``every``: ``index`` is the search tool's) as it is, a method's option as
    ``options.<name>``, and a limit on the files read, which only the server's operator sets, as the flag of
    ``ragfunnel mcp`` that raises it, with what the client can do instead (the embeddings server an index may
    use is the operator's flag too)."""
    methods_options = set(options_schema()["properties"])
    read_limits = {f.name for f in fields(ReadLimits)}

    def spell(name: str) -> str:
        if name in own or (name in every and name not in methods_options):
            return name
        if name in SENT_AS:
            return SENT_AS[name]
        if name == "remote_embedder":
            return "`ragfunnel mcp --remote-embedder` (the server's operator sets it)"
        if name in read_limits:
            return (f"`ragfunnel mcp --{name.replace('_', '-')}` (the server's operator sets it), or send a "
                    "document within the limit")
        return f"options.{name}"

    return spell


def with_generated_options(answer: Callable[..., Any]) -> Callable[..., Any]:
    """``answer`` with its ``options`` parameter typed by :func:`options_schema`, and its ``method`` parameter
    described by the registry's line for each method: the tool's schema of the methods and their options is
    generated from the registry and the configurations, never written twice."""
    signature = inspect.signature(answer, eval_str=True)
    generated = {
        "options": Annotated[dict[str, Any], WithJsonSchema(options_schema())] | None,
        "method": Annotated[str | None, Field(description=f"The method ({DEFAULT_METHOD} unless given): " + "; ".join(
            f"{name}: {described(name)}" for name in CONTEXT_METHODS))],
    }
    parameters = [p.replace(annotation=generated[p.name]) if p.name in generated else p
                  for p in signature.parameters.values()]
    answer.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return answer


def build_server(state: ToolState) -> MCPServer:
    server = MCPServer("ragfunnel", version=__version__, instructions=(
        "Answer questions over long documents (PDF, scans, DOCX, EPUB, HTML, Markdown, text, spreadsheets, "
        "slides, images) with FB-RAG and its "
        "baselines. Give `answer` a path under the server's root, a text, or a document_id from "
        "`add_document`; it returns the answer, a calibrated confidence and citations."))

    def refused(error: RagfunnelError, tool: Callable[..., Any]) -> ToolError:
        """The error for the client, its options spelled as a client of ``tool`` sets them."""
        every = {name for each in (answer, search, add_document) for name in inspect.signature(each).parameters}
        return ToolError(error.spelled(tool_spelling(set(inspect.signature(tool).parameters), every)))

    @server.tool()
    @with_generated_options
    async def answer(question: str, path: str | None = None, text: str | None = None,
                     document_id: str | None = None, method: str | None = None,
                     options: dict[str, Any] | None = None, ctx: Context | None = None) -> dict[str, Any]:
        """Answer a question from a file or folder under the root (`path`), a `text`, or a stored
        `document_id`. `method`: one of the methods its description lists; `options`: the method's options (e.g.
        budget, or max_seconds to bound auto's choice by its predicted time)."""
        try:
            check_question_size(question)
            reading = state.reading(Source(files=None if path is None else [path], context=text,
                                           document=document_id, refusal=SOURCE_REFUSAL))
            name, chosen_options = answer_options(method, options)
        except RagfunnelError as e:
            raise refused(e, answer) from None
        service = state.service()

        def work(job: Job) -> Prediction:
            with reading() as located:
                return service.answered(job, name, chosen_options, question, located=located)

        progress = _Progress(ctx)
        try:
            prediction = await state.run(work, label=f"{name} answer", on_stage=progress.report)
        except RagfunnelError as e:
            raise refused(e, answer) from None
        await progress.sent()
        return {"answer": prediction.answer, "method": prediction.method, "confidence": prediction.confidence,
                "supported": prediction.supported, "citations": [c.to_dict() for c in prediction.citations],
                "citation_note": prediction.citation_note,
                "seconds": round(prediction.trace.seconds, 3)}

    @server.tool()
    async def search(index: str, query: str, top_k: int = 4) -> list[dict[str, Any]]:
        """The `top_k` passages of a corpus index (a name the server was started with, or a folder under
        the root written by `ragfunnel index`) for `query`, by FunnelRAG's retrieval."""
        try:
            if not 1 <= top_k <= SEARCH_TOP_K:
                raise InputError(f"top_k must be between 1 and {SEARCH_TOP_K}")
            directory = state.indexes.get(index) or state.inside(index)
            question = check_question(check_question_size(query))
            found = await state.run(
                lambda job: ragfunnel_search(directory, question, top_k=top_k, post_ranker=state.settings.light,
                                             remote_embedder=state.settings.remote_embedder),
                label=f"search {index}")
        except RagfunnelError as e:
            raise refused(e, search) from None
        return [{"id": h.id, "title": h.title, "text": h.text, "score": round(h.score, 6)} for h in found.results]

    @server.tool()
    async def add_document(path: str) -> dict[str, Any]:
        """Read a file (or every supported file of a folder) under the root once; later `answer` calls name
        it by the returned `document_id`."""
        try:
            doc_id, located = await anyio.to_thread.run_sync(state.add, path)
        except RagfunnelError as e:
            raise refused(e, add_document) from None
        return _summary(doc_id, located)

    @server.tool()
    async def list_documents() -> list[dict[str, Any]]:
        """The documents added so far (the least recently used go first once the store is full)."""
        return [_summary(doc.id, doc.located) for doc in state.service().documents.all() if doc.located is not None]

    @server.tool()
    async def list_indexes() -> list[dict[str, Any]]:
        """The corpus indexes `search` takes by name (those the server was started with), each as `GET
        /v1/indexes` of `ragfunnel serve` describes it: whether it is ready, its documents and, for a watched
        folder, its files, the files pending, the last update and the files that could not be read, with why."""
        return await anyio.to_thread.run_sync(index_views, state.indexes, {})

    @server.tool()
    async def remove_document(document_id: str) -> dict[str, Any]:
        """Remove a document added with `add_document`. Refused while an answer reads it (that answer ends
        normally): call again once it has ended."""
        try:
            state.remove(document_id)
        except RagfunnelError as e:
            raise refused(e, remove_document) from None
        return {"document_id": document_id, "removed": True}

    return server


class _Progress:
    """Each finished stage of an answer sent to the client as progress. The queue's worker reports a stage
    without waiting for the client (a slow or departed one never holds up the models); the tool waits for
    what was sent before it answers, so progress never arrives after the answer."""

    def __init__(self, ctx: Context | None):
        self.ctx, self.loop = ctx, asyncio.get_running_loop()
        self.pending: list[Future] = []

    def report(self, stage: StageTrace) -> None:  # on the queue's worker thread
        if self.ctx is None:
            return
        sending = self.ctx.report_progress(float(len(self.pending) + 1), None, f"{stage.name} done")
        try:
            self.pending.append(asyncio.run_coroutine_threadsafe(sending, self.loop))
        except RuntimeError:  # the event loop has stopped: nobody is listening
            sending.close()

    async def sent(self) -> None:
        for future in list(self.pending):
            try:
                await asyncio.wrap_future(future)
            except Exception:  # noqa: BLE001 - progress the client could not take does not change the answer
                pass


def _summary(doc_id: str, located: LocatedContext) -> dict[str, Any]:
    return {"document_id": doc_id, "words": len(located.text.split()),
            "files": [{"name": d.name, "format": d.format, "pages": d.pages} for d in located.documents]}


def serve_stdio(state: ToolState) -> None:
    """Over this process's stdin and stdout, every message answered, even one the SDK cannot parse."""
    try:
        run_stdio(build_server(state))
    finally:
        state.close()


def serve_http(state: ToolState, *, port: int, token: str | None, allowed_hosts: tuple[str, ...] = ()) -> None:
    """Streamable HTTP on the loopback at :data:`MCP_PATH`, behind ``serve``'s guard (host, origin, token)."""
    import uvicorn

    from ragfunnel.serve.guards import Guard

    app = build_server(state).streamable_http_app(streamable_http_path=MCP_PATH, host="127.0.0.1")
    guarded = Guard(app, token=token, body_limit=state.settings.max_body_bytes, allowed_hosts=allowed_hosts)
    try:
        uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")
    finally:
        state.close()
