"""Documents held by the server, and what the inspector shows of an answer over one.

A document is stored under the first 16 hex digits of its text's SHA-256, so storing the same text
twice gives the same id. A document is removed on request, except while an answer reads it
(:class:`DocumentInUse`). Storing queues a *prefill*: each model reads the document once, as the methods'
prompts begin (task introduction, then the text), and keeps that state (a read-once prefix,
``ragfunnel.llm.prefix_store``), so later questions pay only for the question.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragfunnel.documents import LocatedContext
from ragfunnel.errors import InputError, RagfunnelError
from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import join_chunks
from ragfunnel.prompts import prompt_prefix
from ragfunnel.retrieve.document_cache import chunk_bm25, document_chunks
from ragfunnel.retrieve.fusion import max_normalize
from ragfunnel.retrieve.ranking import question_scores
from ragfunnel.text import check_context
from ragfunnel.text.chunking import CHUNK_WORDS
from ragfunnel.types import Citation, Prediction, SamplingParams

DEFAULT_CHUNK_WORDS = CHUNK_WORDS  # the methods' default: the prefill must read the text exactly as they will


@dataclass
class Document:
    id: str
    text: str
    name: str = ""
    # "light" / "strong" -> "queued" | "reading" | "kept" | "too long to keep whole" | "failed: ..."
    prefill: dict[str, str] = field(default_factory=dict)
    located: LocatedContext | None = None  # the uploaded files it was read from, with their pages and chapters

    def __post_init__(self) -> None:
        if self.located is None:
            self.located = LocatedContext.of_text(self.text, name=self.name or "text")

    def summary(self) -> dict[str, Any]:
        files = [{"name": d.name, "format": d.format, "start": start, "pages": d.pages,
                  "chapters": len({s.heading[0] for s in d.sections if s.heading})}
                 for d, start in zip(self.located.documents, self.located.starts, strict=True)]
        return {"id": self.id, "name": self.name, "words": len(self.text.split()), "characters": len(self.text),
                "files": files, "prefill": dict(self.prefill)}


class DocumentInUse(RagfunnelError):
    """A stored document that an answer is reading now, which a client asked to remove (HTTP 409)."""


class DocumentStore:
    """At most ``limit`` documents in memory (the operator's ``documents`` setting); the least recently used one
    goes first. A document that an answer is reading (:meth:`reading`) cannot be removed until the answer ends:
    :meth:`remove` refuses it."""

    def __init__(self, limit: int):
        self.limit = limit
        self._docs: OrderedDict[str, Document] = OrderedDict()
        self._readers: Counter[str] = Counter()  # id -> answers reading it now
        self._lock = threading.Lock()

    def add(self, text: str, name: str = "", located: LocatedContext | None = None) -> tuple[Document, bool]:
        """The stored document for ``text`` (read from ``located``'s files, if given, whose readers checked it:
        its file separators are control characters of ragfunnel's own) and whether it is new."""
        if located is None:
            text = check_context(text, source="the document text")
        doc_id = hashlib.sha256(text.encode()).hexdigest()[:16]
        with self._lock:
            if doc_id in self._docs:
                self._docs.move_to_end(doc_id)
                return self._docs[doc_id], False
            doc = self._docs[doc_id] = Document(doc_id, text, name, located=located)
            while len(self._docs) > self.limit:
                self._docs.popitem(last=False)
        return doc, True

    def get(self, doc_id: str) -> Document:
        with self._lock:
            if doc_id not in self._docs:
                raise KeyError(doc_id)
            self._docs.move_to_end(doc_id)
            return self._docs[doc_id]

    def all(self) -> list[Document]:
        with self._lock:
            return list(self._docs.values())

    def remove(self, doc_id: str) -> Document:
        """Remove the stored document ``doc_id`` and return it; KeyError if there is none, DocumentInUse while
        an answer reads it (the client removes it once the answer has ended)."""
        with self._lock:
            if doc_id not in self._docs:
                raise KeyError(doc_id)
            if self._readers[doc_id]:
                raise DocumentInUse(f"document {doc_id!r} is being answered now; remove it again once the answer "
                                    "has ended")
            return self._docs.pop(doc_id)

    @contextmanager
    def reading(self, doc: Document) -> Iterator[Document]:
        """``doc`` held while an answer reads it: :meth:`remove` refuses it until the block ends. An answer
        queued before the document was removed still reads the text it was given."""
        with self._lock:
            self._readers[doc.id] += 1
        try:
            yield doc
        finally:
            with self._lock:
                self._readers[doc.id] -= 1
                if not self._readers[doc.id]:
                    del self._readers[doc.id]


def prefill(doc: Document, light: LLM, strong: LLM, *, task: str = "qa") -> None:
    """Have each model read ``doc`` once and keep the state, exactly as the methods' prompts will begin:
    the light model as FB-RAG drafts from a whole document (its chunks joined), the strong model as
    long context reads it (the text as given). ``auto`` then sees both models holding the document."""
    readings = {"light": (light, join_chunks(document_chunks(doc.text, words=DEFAULT_CHUNK_WORDS))),
                "strong": (strong, doc.text)}
    try:
        for role, (model, context) in readings.items():
            prefix = prompt_prefix(task, context)
            if model.count_tokens(prefix) + 64 > model.context_window:
                doc.prefill[role] = "too long to keep whole"
                continue
            doc.prefill[role] = "reading"
            model.generate([prefix + "\n\nReply with one word: ready."],
                           SamplingParams(max_tokens=1, keep_prefix=len(prefix)))
            doc.prefill[role] = "kept"
    except Exception as e:  # a failed prefill only costs the first question the read; no state says "queued" after it
        for role, status in doc.prefill.items():
            if status in ("queued", "reading"):
                doc.prefill[role] = f"failed: {e}"
        raise


def chunk_view(located: LocatedContext, prediction: Prediction, *, question: str,
               chunk_words_: int | None = None) -> list[dict]:
    """Each chunk of the text with its question score (the shared ranking's, max-normalised), its draft score (the best
    over the drafts, max-normalised; None without drafts), whether the answering model read it, and where
    it lies (file, page or chapter)."""
    size = chunk_words_ or DEFAULT_CHUNK_WORDS
    chunks = document_chunks(located.text, words=size)
    if not chunks:
        raise InputError("the document has no words")
    index = chunk_bm25(chunks)
    by_question = max_normalize(question_scores(question, chunks))[0]
    drafts = [f"{s.rationale} {s.answer}" for s in prediction.samples]
    draft_scores = max_normalize(index.score(drafts)).max(axis=0) if drafts else None
    read = {sc.chunk.position for sc in prediction.chunks_used}
    if any(sc.chunk.n_words > size for sc in prediction.chunks_used):  # long context reads the text whole
        read = {c.position for c in chunks}
    return [{"position": c.position, "text": c.text,
             "question_score": round(float(by_question[i]), 4),
             "draft_score": None if draft_scores is None else round(float(np.asarray(draft_scores)[i]), 4),
             "read": c.position in read, "start": c.start, "where": _where(located, c.start or 0)}
            for i, c in enumerate(chunks)]


def _where(located: LocatedContext, offset: int) -> str:
    place = located.locate(offset)
    section = place.section.describe() if place.section else ""
    named = len(located.documents) > 1 or place.document.format != "text"
    return " \u00b7 ".join(part for part in (place.document.name if named else "", section) if part)


def citations_view(located: LocatedContext, prediction: Prediction) -> list[dict]:
    """The prediction's citations, each with ``context_start``: where its quote begins in the stored text
    (the inspector scrolls there)."""
    return [{**c.to_dict(), "context_start": _context_start(located, c)} for c in prediction.citations]


def _context_start(located: LocatedContext, citation: Citation) -> int:
    """Where ``citation``'s quote begins in ``located.text``. A citation names its file by name, which nothing
    makes unique within a context (two files called ``notes.txt``), so its file is the one of that name whose
    text holds the quote at the citation's offset."""
    named = [(d, start) for d, start in zip(located.documents, located.starts, strict=True) if d.name == citation.file]
    quoting = [start for d, start in named if d.text[citation.start:citation.end] == citation.quote]
    return (quoting or [start for _, start in named])[0] + citation.start
