"""The service's state, and the work behind its answers and searches.

:class:`ServiceState` is what a running service holds: the operator's settings, the two models (warm, or MCP's
loaded by the first job that needs them), the indexes, the stored documents and the one job queue, and what it
keeps between requests (method objects, and per index the funnel's rankers and the retriever searches use),
built on the queue's worker. A request reads the state and passes its own values as arguments, so no object
another request uses is changed by it.

:func:`load` loads the models and indexes at start. :func:`answer_job` and :func:`search_job` turn a request
into the label and work of one job; everything a request can get wrong is refused before its job is queued,
and building a method (which may load a model) happens on the worker. :func:`checked_method` is the check
every answer passes and :meth:`ServiceState.answered` the work of every answer, whichever front end asked
(``/v1/answer``, chat completions, MCP's ``answer``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ragfunnel.api import answer_located
from ragfunnel.corpus.funnel import flat_search
from ragfunnel.documents import LocatedContext
from ragfunnel.errors import BackendUnavailable, InputError
from ragfunnel.llm import resolve
from ragfunnel.llm.base import LLM
from ragfunnel.methods import (
    DEFAULT_CORPUS_METHOD,
    DEFAULT_METHOD,
    Method,
    check_source,
    make_method,
    options_of,
    registered,
)
from ragfunnel.methods.base import check_question
from ragfunnel.methods.config import AnswerConfig
from ragfunnel.prompts import check_task
from ragfunnel.serve.documents import Document, DocumentStore, chunk_view, citations_view
from ragfunnel.serve.jobs import Job, JobQueue
from ragfunnel.serve.options import checked_options, echoed
from ragfunnel.serve.settings import API, Settings
from ragfunnel.source import Source
from ragfunnel.text import check_context
from ragfunnel.types import Prediction, StageTrace, on_stage

if TYPE_CHECKING:
    from ragfunnel.corpus.funnel import FunnelRetriever
    from ragfunnel.corpus.index import CorpusIndex
    from ragfunnel.corpus.watch import WatchedFolder
    from ragfunnel.retrieve.attention import PostRanker
    from ragfunnel.retrieve.rerank import PreRanker
    from ragfunnel.serve.request_bodies import AnswerIn, SearchIn

log = logging.getLogger("ragfunnel.serve")

METHODS_KEPT = 32  # method objects kept between requests, the least recently used dropped first
SOURCE_REFUSAL = "pass exactly one of document_id (a stored document), text, and index"


class NotFound(InputError):
    """A stored document or an index the client named that this server does not have (HTTP 404)."""


@dataclass(frozen=True)
class Loaded:
    """What the service loads before it answers: the two models, warm, and the operator's indexes by name."""

    light: LLM
    strong: LLM
    indexes: dict[str, CorpusIndex]


def load(settings: Settings) -> Loaded:
    """Open the indexes, then resolve and warm the models; a bad index, spec or file raises here, in one line
    (an index first: it is found in a second, a model in a minute)."""
    from ragfunnel.corpus.index import CorpusIndex

    indexes = {name: CorpusIndex(path, remote_embedder=settings.remote_embedder)
               for name, path in settings.indexes.items()}
    started = time.perf_counter()
    light, strong = resolve(settings.light), resolve(settings.strong)
    for model in dict.fromkeys([light, strong]):
        model.warm_up()
    log.info("models ready in %.1fs: light %s, strong %s", time.perf_counter() - started, light.name, strong.name)
    return Loaded(light, strong, indexes)


@dataclass(frozen=True)
class Rankers:
    """FunnelRAG's stage 2 and 3 rankers over one index: loaded once, shared by its searches and answers."""

    pre_ranker: PreRanker
    post_ranker: PostRanker


@dataclass
class ServiceState:
    """What a running service holds. The settings, indexes, document store and queue are set at start, and the
    models at start too (``serve``) or by the first job that needs each (``mcp``); ``methods``, ``rankers`` and
    ``retrievers`` are filled on the queue's worker as requests first need them, and what is in them is never
    changed by a request (a search passes its sizes to the retriever).

    A watched folder's index (``watched``, ``serve --watch``) is replaced whole after each update
    (:meth:`replace_index`, from the watch's thread); the worker takes the new one before the next job that reads
    an index, and drops what it kept of the old one, while a job already under way reads the old one to its end."""

    settings: Settings
    indexes: dict[str, CorpusIndex]
    documents: DocumentStore
    jobs: JobQueue
    resolved: dict[str, LLM] = field(default_factory=dict)  # the models by role, once loaded
    methods: OrderedDict[str, Method] = field(default_factory=OrderedDict)
    rankers: dict[str, Rankers] = field(default_factory=dict)
    retrievers: dict[str, FunnelRetriever] = field(default_factory=dict)
    watched: dict[str, WatchedFolder] = field(default_factory=dict)  # by name, their indexes in ``indexes``
    _replaced: dict[str, CorpusIndex] = field(default_factory=dict, init=False, repr=False)  # not yet served
    _replacing: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def started(cls, settings: Settings, loaded: Loaded) -> ServiceState:
        """The state of a service starting with ``loaded``: no documents yet, and one queue for every job (the
        strong model's text is what streams)."""
        jobs = JobQueue(capacity=settings.queue, streaming=loaded.strong)
        return cls(settings, loaded.indexes, DocumentStore(settings.documents), jobs,
                   resolved={"light": loaded.light, "strong": loaded.strong})

    @classmethod
    def on_demand(cls, settings: Settings) -> ServiceState:
        """The state of a service that loads nothing before a job needs it (MCP's: a host lists the tools at
        once): each model is resolved on the worker by the first job that uses it. It has no indexes of its own
        and streams no text."""
        return cls(settings, {}, DocumentStore(settings.documents), JobQueue(capacity=settings.queue))

    @property
    def light(self) -> LLM:
        """The draft model (FB-RAG's): loaded at start, or by the first job that needs it."""
        return self._model("light", self.settings.light)

    @property
    def strong(self) -> LLM:
        """The answering model: loaded at start, or by the first job that needs it."""
        return self._model("strong", self.settings.strong)

    @property
    def models(self) -> dict[str, LLM]:
        """The models by role."""
        return {"light": self.light, "strong": self.strong}

    def _model(self, role: str, spec: str) -> LLM:
        if role not in self.resolved:
            self.resolved[role] = resolve(spec)
        return self.resolved[role]

    def index(self, name: str) -> CorpusIndex:
        """The operator's index ``name`` (a watched folder's newest); NotFound naming the ones this server has,
        BackendUnavailable for a watched folder whose index is not written yet."""
        with self._replacing:
            newest = self._replaced.get(name, self.indexes.get(name))
        if newest is not None:
            return newest
        if name in self.watched:
            raise BackendUnavailable(f"index {echoed(name)} is not written yet: its folder is being read, or holds "
                                     f"no readable file (GET {API}/indexes/{name} says which); ask again later")
        have = ", ".join(sorted({*self.indexes, *self.watched})) or (
            "none (its operator names them when starting it: `ragfunnel serve --index NAME=DIR`)")
        raise NotFound(f"no index {echoed(name)}; this server has: {have}")

    def replace_index(self, name: str, index: CorpusIndex) -> None:
        """Serve ``index`` as ``name`` from the next job on (any thread: a watched folder's, after its update)."""
        with self._replacing:
            self._replaced[name] = index

    def _take_replaced(self) -> None:
        """On the worker: serve the indexes replaced since the last job, dropping the retrievers and methods
        made over the old ones and the pre-rankers that read their vectors (the post-ranker, a model, is kept)."""
        from ragfunnel.retrieve.rerank import load_pre_ranker

        with self._replacing:
            replaced, self._replaced = self._replaced, {}
            if not replaced:
                return
            self.indexes = {**self.indexes, **replaced}  # a new dict: a request thread may be reading the old one
        for name, index in replaced.items():
            self.retrievers.pop(name, None)
            for key in [key for key in self.methods if json.loads(key)[1] == name]:
                del self.methods[key]
            if (kept := self.rankers.pop(name, None)) is not None:
                self.rankers[name] = Rankers(load_pre_ranker(self.settings.pre_ranker, stored=index.document_vectors,
                                                             embedder=index.embedder), kept.post_ranker)

    def document(self, doc_id: str) -> Document:
        """The stored document ``doc_id``; NotFound saying how to store one."""
        try:
            return self.documents.get(doc_id)
        except KeyError:
            raise NotFound(f"no document {echoed(doc_id)}; store one with POST {API}/documents") from None

    def remove_document(self, doc_id: str) -> None:
        """Remove the stored document ``doc_id``; NotFound if there is none, DocumentInUse while an answer
        reads it."""
        try:
            self.documents.remove(doc_id)
        except KeyError:
            raise NotFound(f"no document {echoed(doc_id)}; GET {API}/documents lists the stored ones") from None

    def index_rankers(self, name: str) -> Rankers:
        """FunnelRAG's rankers over index ``name`` (the operator's), loaded by the first search or answer that
        needs them; on the worker."""
        from ragfunnel.retrieve.attention import load_post_ranker
        from ragfunnel.retrieve.rerank import load_pre_ranker

        self._take_replaced()
        if name not in self.rankers:
            index = self.indexes[name]
            self.rankers[name] = Rankers(
                load_pre_ranker(self.settings.pre_ranker, stored=index.document_vectors, embedder=index.embedder),
                load_post_ranker(self.settings.post_ranker))
        return self.rankers[name]

    def retriever(self, name: str) -> FunnelRetriever:
        """The funnel over index ``name`` that searches use, built once on the worker; each search passes its
        own sizes, so it is never changed."""
        from ragfunnel.corpus.funnel import FunnelRetriever

        self._take_replaced()
        if name not in self.retrievers:
            rankers = self.index_rankers(name)
            self.retrievers[name] = FunnelRetriever(self.indexes[name], pre_ranker=rankers.pre_ranker,
                                                    post_ranker=rankers.post_ranker)
        return self.retrievers[name]

    def method(self, name: str, index: str | None, options: dict[str, Any]) -> Method:
        """Method ``name`` with ``options`` (over index ``index``, or a context), answering with the service's
        models: built on the worker (building one may load a model) once per (method, index, options) and
        kept. A corpus method shares its index's rankers with search: loaded once, not per options."""
        self._take_replaced()
        key = json.dumps([name, index, options], sort_keys=True, default=str)
        if key in self.methods:
            self.methods.move_to_end(key)
            return self.methods[key]
        if index is not None:
            rankers = self.index_rankers(index)
            loaded = {"pre_ranker": rankers.pre_ranker, "post_ranker": rankers.post_ranker}
            options = {**options, **{k: v for k, v in loaded.items() if k in options}}
        built = make_method(name, index=None if index is None else self.indexes[index], light=self.light,
                            strong=self.strong, **options)
        self.methods[key] = built
        while len(self.methods) > METHODS_KEPT:
            self.methods.popitem(last=False)
        return built

    def answered(self, job: Job, name: str, options: dict[str, Any], question: str, *,
                 located: LocatedContext | None, index: str | None = None,
                 choices: list[str] | None = None) -> Prediction:
        """The kept method ``name`` with ``options``, answering ``question`` over ``located`` (cited) or else
        over the index ``index``, each stage told to the job's listeners; on the worker. Every front end's
        answer runs here."""
        method = self.method(name, index, options)
        with on_stage(job.on_stage or _no_stage, started=job.on_stage_started):
            if located is None:  # a corpus method over one of the server's indexes
                prediction = method.run(question, choices=choices)
            else:
                prediction = answer_located(method, question, located, choices=choices)
        job.check()
        return prediction


def checked_method(method: str | None, options: dict[str, Any], *, task: str = AnswerConfig.task,
                   index: CorpusIndex | None = None,
                   operator: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    """A request's method (None: the default for its source) and its options, checked at once: the client's
    options by :func:`~ragfunnel.serve.options.checked_options`, the task (by default the methods' own), the
    method against its source (``index``, or a context); then the ``operator``'s options the method takes (its
    rankers, by spec) added.
    The models are not among them: the front end that builds the method passes its own."""
    over_index = index is not None
    name = method if method is not None else DEFAULT_CORPUS_METHOD if over_index else DEFAULT_METHOD
    registered(name)
    checked = {**checked_options(name, options, over_index=over_index), "task": check_task(task)}
    check_source(name, index=index)
    takes = set(options_of(name, over_index=over_index))
    return name, checked | {k: v for k, v in (operator or {}).items() if k in takes}


def search_job(state: ServiceState, body: SearchIn) -> tuple[str, Callable[[Job], dict[str, Any]]]:
    """The label and work of one search over one of the operator's indexes: the funnel's passages, or flat
    dense search's. The request's sizes go to the search as arguments."""
    state.index(body.index)
    question = check_question(body.question)

    def work(job: Job) -> dict[str, Any]:
        if not body.funnel:
            return flat_search(state.index(body.index), question, body.top_k).to_dict()
        return state.retriever(body.index).search(question, top_passages=body.top_k).to_dict()

    return f"search {body.index}", work


def answer_job(state: ServiceState, body: AnswerIn) -> tuple[str, Callable[[Job], dict[str, Any]]]:
    """The label and work of one answer (``/v1/answer`` and ``/v1/chat/completions``), checked before it is
    queued: everything a request can get wrong is refused here."""
    source = Source(document=body.document_id, context=body.text, index=body.index, refusal=SOURCE_REFUSAL)
    doc = None if source.document is None else state.document(source.document)
    if doc is not None:
        located = doc.located
    else:
        located = None if source.context is None else LocatedContext.of_text(check_context(source.context),
                                                                             name="text")
    name, options = checked_method(body.method, body.options, task=body.task,
                                   index=None if source.index is None else state.index(source.index),
                                   operator=state.settings.operator_options())
    label = f"{name} answer"

    def work(job: Job) -> dict[str, Any]:
        with nullcontext() if doc is None else state.documents.reading(doc):  # not removed while it is read
            return answered(job)

    def answered(job: Job) -> dict[str, Any]:
        started = time.perf_counter()
        prediction = state.answered(job, name, options, body.question, located=located, index=source.index,
                                    choices=body.choices)
        log.info("%s: %.1fs, %d input tokens, question %d chars, document %d chars", label,
                 time.perf_counter() - started, prediction.trace.input_tokens, len(body.question),
                 len(located.text) if located else 0)
        if located is None:
            return prediction.to_dict()
        return {**prediction.to_dict(), "citations": citations_view(located, prediction),
                "chunks": chunk_view(located, prediction, question=body.question,
                                     chunk_words_=body.options.get("chunk_words"))}

    return label, work


def _no_stage(stage: StageTrace) -> None:
    pass
