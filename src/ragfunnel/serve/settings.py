"""How the answering service runs: the operator's ``ragfunnel serve`` options, the API's path prefix, and what
every question and search is held to (over HTTP and MCP alike): the longest question, the most passages.

Every module of the service reads these; none of them is a client's to set.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ragfunnel.declared import Config, default_changed, setting, setting_made_by
from ragfunnel.documents import ReadLimits
from ragfunnel.documents.limits import MB
from ragfunnel.errors import InputError
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG
from ragfunnel.methods.config import FunnelConfig
from ragfunnel.retrieve.rerank import DEFAULT_PRE_RANKER

API = "/v1"
TOKEN_ENV = "RAGFUNNEL_TOKEN"  # where ``serve`` and ``mcp`` also read their token from
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
class Settings(Config):
    """How the service runs: ``ragfunnel serve``'s options, each declared once (the ``serve`` and ``mcp`` commands'
    options are generated from these fields)."""

    host: str = setting("127.0.0.1", "Address to bind. Anything but loopback needs --token.")
    port: int = setting(8000, "Port to listen on.", ge=1, le=65535)
    light: str = setting(DEFAULT_LIGHT, "Draft model (FB-RAG).", operator_only=True, metavar="SPEC")
    strong: str = setting(DEFAULT_STRONG, "Answering model.", operator_only=True, metavar="SPEC")
    token: str | None = setting(None, f"Bearer token every /v1 request must carry (also ${TOKEN_ENV}).",
                                metavar="SECRET")
    max_body_mb: float = setting(8.0, "Largest request body; larger ones get 413.", ge=0.001, unit="MB")
    queue: int = setting(8, "Requests waiting or running at once; more get 429 with Retry-After.", ge=1, le=1000)
    deadline: float = setting(600.0, "Seconds a request may take before it is cancelled (504).", ge=1,
                              unit="seconds")
    cors_origins: list[str] = setting_made_by(
        list, "Allow browser pages from ORIGIN to call the API (repeatable; off by default).", metavar="ORIGIN")
    allowed_hosts: list[str] = setting_made_by(  # beyond loopback
        list, "Also answer requests addressed to NAME (the Host header); loopback names always are. Others get 421, "
              "which stops web pages reaching the server by DNS rebinding. '*' answers any (needs --token).",
        metavar="NAME")
    documents: int = setting(64, "Documents kept at once; adding one more drops the least recently used.", ge=1)
    prefill: bool = setting(True, "Have the models read a stored document before it is asked.")
    indexes: dict[str, str] = setting_made_by(  # name -> directory, for search and corpus methods
        dict, "A corpus index (`ragfunnel index`) clients may search and ask by NAME (repeatable); clients never pass "
              "paths.", operator_only=True, metavar="NAME=DIR")
    watch: dict[str, str] = setting_made_by(  # name -> folder, its index kept current in the cache
        dict, "Keep an index of the folder DIR current as its files come and go, searched and asked by NAME like "
              "--index (repeatable); it lives in the cache (watched/NAME-<hash of DIR>). Needs the [watch] extra.",
        operator_only=True, metavar="NAME=DIR")
    pre_ranker: str = default_changed(FunnelConfig, "pre_ranker", DEFAULT_PRE_RANKER)  # for every request
    post_ranker: str = default_changed(FunnelConfig, "post_ranker", DEFAULT_LIGHT)
    remote_embedder: str | None = setting(None, "The embeddings server trusted with the queries of an index it "
                                                "embedded.", operator_only=True, metavar="openai:URL#MODEL")
    read_limits: ReadLimits = setting(ReadLimits(), "What an uploaded file may hold.")

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * MB)

    def upload_limits(self) -> ReadLimits:
        """The limits an uploaded file is read within: no file larger than a request body may be."""
        return replace(self.read_limits, max_document_mb=min(self.read_limits.max_document_mb, self.max_body_mb))

    def operator_options(self) -> dict[str, str]:
        """The options only the operator sets, as this server sets them."""
        return {"light": self.light, "strong": self.strong, "pre_ranker": self.pre_ranker,
                "post_ranker": self.post_ranker}
