"""The work behind the service's answers and searches: the models and indexes loaded at start (:func:`load`),
one answer request checked and turned into a job (:func:`answer_job`), and a search over one of the
operator's indexes (:func:`index_retriever`, :func:`search_result`).

``state`` is the running app's: its job queue, stored documents, models, indexes, and the method objects,
retrievers and rankers kept between requests. Everything a request can get wrong is refused before its job
is queued; building a method (which may load a model) happens on the worker.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from ragfunnel.api import answer_located
from ragfunnel.documents import LocatedContext
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.llm import resolve
from ragfunnel.methods import (
    DEFAULT_CORPUS_METHOD,
    DEFAULT_METHOD,
    METHODS,
    check_source,
    make_method,
    options_of,
)
from ragfunnel.prompts import check_task
from ragfunnel.serve.documents import chunk_view, citations_view
from ragfunnel.serve.jobs import Job
from ragfunnel.serve.options import checked_options
from ragfunnel.serve.request_bodies import AnswerIn, SearchIn
from ragfunnel.serve.settings import API, Settings
from ragfunnel.text import check_context
from ragfunnel.types import on_stage

log = logging.getLogger("ragfunnel.serve")


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


def _warm_up(model: Any) -> None:
    warm = getattr(model, "warm_up", None)
    if warm is not None:
        warm()


def _open_index(path: str) -> Any:
    from ragfunnel.corpus.index import CorpusIndex

    return CorpusIndex(path)


def served_index(state: dict[str, Any], name: str) -> Any:
    """The operator's index ``name``; 404 naming the ones this server has."""
    if name not in state["indexes"]:
        raise HTTPException(404, f"no index {name!r}; this server has: "
                                 f"{', '.join(sorted(state['indexes'])) or 'none (start it with --index NAME=DIR)'}")
    return state["indexes"][name]


def stored_document(state: dict[str, Any], doc_id: str) -> Any:
    """The stored document ``doc_id``; 404 saying how to store one."""
    try:
        return state["documents"].get(doc_id)
    except KeyError:
        raise HTTPException(404, f"no document {doc_id!r}; store one with POST {API}/documents") from None


def index_retriever(state: dict[str, Any], settings: Settings, name: str) -> Any:
    """FunnelRAG's retriever over index ``name``, for search; kept, with the rankers the funnel method uses."""
    from ragfunnel.corpus.funnel import FunnelRetriever

    if name not in state["retrievers"]:
        state["retrievers"][name] = FunnelRetriever(state["indexes"][name], **_rankers(state, settings, name))
    return state["retrievers"][name]


def search_result(retriever: Any, body: SearchIn) -> dict[str, Any]:
    """The passages ``retriever`` finds for a search request: the funnel's, or flat dense search's."""
    from ragfunnel.corpus.funnel import flat_search
    from ragfunnel.methods.base import check_question

    question = check_question(body.question)
    if not body.funnel:
        return flat_search(retriever.index, question, body.top_k).to_dict()
    retriever.top_passages = body.top_k
    return retriever.search(question).to_dict()


def answer_job(state: dict[str, Any], settings: Settings,
               body: AnswerIn) -> tuple[str, Callable[[Job], dict[str, Any]]]:
    """The label and work of one answer (``/v1/answer`` and ``/v1/chat/completions``), checked before it is
    queued: everything a request can get wrong is refused here."""
    if sum(x is not None for x in (body.document_id, body.text, body.index)) != 1:
        raise InputError("pass exactly one of document_id (a stored document), text, and index")
    if body.document_id is not None:
        located = stored_document(state, body.document_id).located
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


def _checked_method(state: dict[str, Any], settings: Settings, body: AnswerIn) -> tuple[str, dict[str, Any]]:
    """The method's name and options for this request, checked at once (everything a request can get wrong);
    the options include the operator's models, by spec."""
    default = DEFAULT_CORPUS_METHOD if body.index is not None else DEFAULT_METHOD
    name = body.method if body.method is not None else default
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}")
    options = {**checked_options(name, body.options), "task": check_task(body.task)}
    check_source(name, index=None if body.index is None else served_index(state, body.index))
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
