"""``ragfunnel mcp``: ragfunnel's answers as Model Context Protocol tools, on the official ``mcp`` SDK.

Tools: ``answer`` (a question over a file under the root, a text, or a stored document: the answer, its
confidence and citations), ``search`` (an index's passages), ``add_document`` (read a file or folder under the
root once, keep it by id) and ``list_documents``. Every path a client names must resolve, symlinks followed,
inside ``--root``. Models load at the first answer, so a host lists the tools at once. Over stdio (the
default) or streamable HTTP on the loopback (``--http``, at ``/v1/mcp``, behind the same host, origin and
token checks as ``serve``).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from ragfunnel.api import answer_located
from ragfunnel.api import search as ragfunnel_search
from ragfunnel.documents import LocatedContext, ReadLimits, read_context, resolved
from ragfunnel.errors import InputError, RagfunnelError
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG
from ragfunnel.methods import DEFAULT_METHOD, METHODS, make_method, method_kind, options_of
from ragfunnel.serve.mcp_stdio import run_stdio
from ragfunnel.text import check_context
from ragfunnel.types import on_stage

MCP_PATH = "/v1/mcp"
TOP_K_LIMIT = 100


@dataclass
class ToolState:
    """What the tools share: the root, the operator's models and indexes, the documents added so far."""

    root: Path
    light: str = DEFAULT_LIGHT
    strong: str = DEFAULT_STRONG
    indexes: dict[str, Path] = field(default_factory=dict)
    limits: ReadLimits = field(default_factory=ReadLimits)
    documents: dict[str, LocatedContext] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)  # one answer at a time: the models are shared

    def inside(self, given: str) -> Path:
        """``given`` (relative to the root, or absolute) if it resolves inside the root; refused otherwise."""
        if not given or "\x00" in given:
            raise InputError("path is empty; name a file or folder under the root")
        path = Path(given) if Path(given).is_absolute() else self.root / given
        if not path.is_symlink() and not path.exists():
            raise InputError(f"{given!r} does not exist under the root {self.root}")
        real = resolved(path)  # a symlink loop is one line, not a traceback
        if not real.is_relative_to(self.root):
            raise InputError(f"{given!r} is outside the root this server reads ({self.root}); "
                             "pass a path under it, or restart the server with another --root")
        return real

    def read(self, path: str) -> LocatedContext:
        """A file or folder under the root; a folder's walk skips every entry that resolves outside it."""
        return read_context([self.inside(path)], self.limits, root=self.root)


def build_server(state: ToolState) -> MCPServer:
    server = MCPServer("ragfunnel", instructions=(
        "Answer questions over long documents (PDF, DOCX, EPUB, HTML, Markdown, text) with FB-RAG and its "
        "baselines. Give `answer` a path under the server's root, a text, or a document_id from "
        "`add_document`; it returns the answer, a calibrated confidence and citations."))

    def refused(error: Exception) -> ToolError:
        return ToolError(str(error))

    @server.tool()
    async def answer(question: str, path: str | None = None, text: str | None = None,
                     document_id: str | None = None, method: str | None = None,
                     max_seconds: float | None = None, ctx: Context | None = None) -> dict[str, Any]:
        """Answer a question from a file or folder under the root (`path`), a `text`, or a stored
        `document_id`. `method`: auto (default), fb, op, lc, ... ; `max_seconds` bounds auto's choice."""
        try:
            if sum(x is not None for x in (path, text, document_id)) != 1:
                raise InputError("pass exactly one of path, text and document_id")
            name = method or DEFAULT_METHOD
            if name not in METHODS or method_kind(name) != "context":
                raise InputError(f"unknown method {name!r} for a document; use one of "
                                 f"{', '.join(m for m in METHODS if method_kind(m) == 'context')}")
            if max_seconds is not None and (max_seconds <= 0 or name != "auto"):
                raise InputError("max_seconds must be positive, and goes with method auto")
            if path is not None:
                located = state.read(path)
            elif text is not None:
                located = LocatedContext.of_text(check_context(text))
            elif document_id in state.documents:
                located = state.documents[document_id]
            else:
                raise InputError(f"no document {document_id!r}; add one with add_document")
            models = {"light": state.light, "strong": state.strong, "max_seconds": max_seconds}
            chosen = make_method(name, **{k: v for k, v in models.items() if v is not None and k in options_of(name)})
        except RagfunnelError as e:
            raise refused(e) from None
        stages: list[str] = []

        def run() -> Any:
            def stage_done(stage: Any) -> None:
                stages.append(stage.name)
                if ctx is not None:
                    anyio.from_thread.run(ctx.report_progress, float(len(stages)), None, f"{stage.name} done")

            with state.lock, on_stage(stage_done):
                return answer_located(chosen, question, located)

        try:
            prediction = await anyio.to_thread.run_sync(run)
        except RagfunnelError as e:
            raise refused(e) from None
        return {"answer": prediction.answer, "method": prediction.method, "confidence": prediction.confidence,
                "supported": prediction.supported, "citations": [c.to_dict() for c in prediction.citations],
                "citation_note": prediction.citation_note,
                "seconds": round(prediction.trace.seconds, 3)}

    @server.tool()
    async def search(index: str, query: str, top_k: int = 4) -> list[dict[str, Any]]:
        """The `top_k` passages of a corpus index (a name the server was started with, or a folder under
        the root written by `ragfunnel index`) for `query`, by FunnelRAG's retrieval."""
        try:
            if not 1 <= top_k <= TOP_K_LIMIT:
                raise InputError(f"top_k must be between 1 and {TOP_K_LIMIT}")
            directory = state.indexes.get(index) or state.inside(index)

            def run() -> Any:
                with state.lock:
                    return ragfunnel_search(directory, query, top_k=top_k, post_ranker=state.light)

            found = await anyio.to_thread.run_sync(run)
        except RagfunnelError as e:
            raise refused(e) from None
        return [{"id": h.id, "title": h.title, "text": h.text, "score": round(h.score, 6)} for h in found.results]

    @server.tool()
    async def add_document(path: str) -> dict[str, Any]:
        """Read a file (or every supported file of a folder) under the root once; later `answer` calls name
        it by the returned `document_id`."""
        try:
            located = await anyio.to_thread.run_sync(state.read, path)
        except RagfunnelError as e:
            raise refused(e) from None
        doc_id = hashlib.sha256(located.text.encode()).hexdigest()[:16]
        state.documents[doc_id] = located
        return _summary(doc_id, located)

    @server.tool()
    async def list_documents() -> list[dict[str, Any]]:
        """The documents added so far."""
        return [_summary(doc_id, located) for doc_id, located in state.documents.items()]

    return server


def _summary(doc_id: str, located: LocatedContext) -> dict[str, Any]:
    return {"document_id": doc_id, "words": len(located.text.split()),
            "files": [{"name": d.name, "format": d.format, "pages": d.pages} for d in located.documents]}


def serve_stdio(state: ToolState) -> None:
    """Over this process's stdin and stdout, every message answered, even one the SDK cannot parse."""
    run_stdio(build_server(state))


def serve_http(state: ToolState, *, port: int, token: str | None, allowed_hosts: tuple[str, ...] = ()) -> None:
    """Streamable HTTP on the loopback at :data:`MCP_PATH`, behind ``serve``'s guard (host, origin, token)."""
    import uvicorn

    from ragfunnel.serve.guards import Guard

    app = build_server(state).streamable_http_app(streamable_http_path=MCP_PATH, host="127.0.0.1")
    guarded = Guard(app, token=token, body_limit=8 * 1024 * 1024, allowed_hosts=allowed_hosts)
    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")
