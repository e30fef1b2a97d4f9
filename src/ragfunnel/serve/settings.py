"""How the answering service runs: the operator's ``ragfunnel serve`` options, the API's path prefix, and what
every question and search is held to (over HTTP and MCP alike): the longest question, the most passages.

Every module of the service reads these; none of them is a client's to set.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ragfunnel.documents import ReadLimits
from ragfunnel.documents.limits import MB
from ragfunnel.errors import InputError
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG
from ragfunnel.retrieve.rerank import DEFAULT_PRE_RANKER

API = "/v1"
SEARCH_TOP_K = 100
QUESTION_CHARS = 20_000  # a question longer than this is a document sent in the wrong field


def check_question_size(question: str) -> str:
    """``question``, refused past :data:`QUESTION_CHARS` before any model reads it (a model's time grows with
    its length): the one check of every route and tool that takes a question."""
    if len(question) > QUESTION_CHARS:
        raise InputError(f"the question is {len(question):,} characters, over the limit of {QUESTION_CHARS:,}; "
                         "send long text as the document (text or document_id) and ask about it")
    return question


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
    remote_embedder: str | None = None  # the embeddings server trusted with the queries of an index it embedded
    read_limits: ReadLimits = field(default_factory=ReadLimits)  # for uploaded files

    def upload_limits(self) -> ReadLimits:
        """The limits an uploaded file is read within: no file larger than a request body may be."""
        return replace(self.read_limits, max_document_mb=min(self.read_limits.max_document_mb,
                                                              self.max_body_bytes / MB))

    def operator_options(self) -> dict[str, str]:
        """The options only the operator sets, as this server sets them."""
        return {"light": self.light, "strong": self.strong, "pre_ranker": self.pre_ranker,
                "post_ranker": self.post_ranker}
