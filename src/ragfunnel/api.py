"""The one-call Python API, mirroring ``ragfunnel ask``."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from ragfunnel.confidence import Abstaining, using_calibration
from ragfunnel.corpus.funnel import FunnelRetriever, SearchResult, flat_search
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.documents import LocatedContext, ReadLimits, cited, read_context
from ragfunnel.errors import ConfigError
from ragfunnel.llm import DEFAULT_LIGHT
from ragfunnel.methods import DEFAULT_CORPUS_METHOD, DEFAULT_METHOD, ContextMethod, make_method
from ragfunnel.methods.base import check_question
from ragfunnel.methods.funnel import open_funnel
from ragfunnel.retrieve.rerank import DEFAULT_PRE_RANKER
from ragfunnel.source import Source
from ragfunnel.text import check_context
from ragfunnel.types import Prediction

SOURCE_REFUSAL = ("answer() reads a context (a long text), files (paths of documents or folders), or an index "
                  "(a corpus index directory); pass exactly one")


def answer(
    question: str,
    context: str | None = None,
    *,
    files: list[str | Path] | None = None,
    index: CorpusIndex | str | Path | None = None,
    method: str | None = None,
    choices: list[str] | None = None,
    abstain: float | None = None,
    calibration: str | Path | None = None,
    **options: Any,
) -> Prediction:
    """Answer ``question`` from a long ``context``, from ``files`` (PDF, DOCX, EPUB, HTML, Markdown, text,
    spreadsheets, slides, scans and images, and folders of them, read as one context), or from a corpus
    ``index`` (a directory written by ``ragfunnel index``), with ``method`` (see ``ragfunnel.METHODS``; by
    default ``auto`` over a context, ``funnel`` over an index).

    ``options`` are the method's keyword options, e.g. ``light="bundled:qwen2.5-0.5b"``,
    ``strong="openai:http://127.0.0.1:8000/v1#qwen"``, ``budget=1500``, ``samples=5``,
    ``task="multihop"``, or ``documents=5`` for DRAG. An option the method does not take is an error
    naming the ones it does; ``prefer="speed"|"balanced"|"quality"`` sets how far ``auto`` climbs.

    The prediction's ``confidence`` is the estimated probability that the answer is right, calibrated by
    ``calibration`` (a file written by ``ragfunnel calibrate``; default: ``$RAGFUNNEL_CALIBRATION``, else
    the shipped one). ``abstain``: below this confidence the answer is "unanswerable" (the withheld
    answer is in the trace's ``abstain`` stage).

    Over a context or files, ``prediction.citations`` says where the answer came from (file, page or
    chapter, and the supporting sentence). An index whose vectors come from an embeddings server is
    refused when named by its directory; open it as ``CorpusIndex(DIR, remote_embedder="openai:URL#MODEL")``
    to trust that server with its queries and ``OPENAI_API_KEY``.
    """
    source = Source(context=context, files=files, index=index, refusal=SOURCE_REFUSAL)
    if source.index is None:
        chosen = make_method(method or DEFAULT_METHOD, **options)
    else:
        chosen = make_method(method or DEFAULT_CORPUS_METHOD, index=source.index, **options)
    if abstain is not None:
        chosen = Abstaining(chosen, abstain)
    with using_calibration(calibration):
        if source.index is not None:
            return chosen.run(question, choices=choices)
        located = (LocatedContext.of_text(check_context(source.context)) if source.context is not None
                   else read_context(list(source.files or []), ReadLimits()))
        return answer_located(chosen, question, located, choices=choices)


def answer_located(method: ContextMethod, question: str, located: LocatedContext, *,
                   choices: list[str] | None = None) -> Prediction:
    """Run a context method over ``located``'s text and cite where in its files the answer came from."""
    prediction = method.run(question, located.text, choices=choices)
    prediction.citations, prediction.citation_note = cited(prediction, located, question)
    return prediction


def search(index: CorpusIndex | str | Path, question: str, *, top_k: int = 4, funnel: bool = True,
           exact: bool = False, top_clusters: int | None = None, top_documents: int = 8,
           pre_ranker: str = DEFAULT_PRE_RANKER, post_ranker: str = DEFAULT_LIGHT,
           remote_embedder: str | None = None) -> SearchResult:
    """The ``top_k`` passages of a corpus index for ``question``, mirroring ``ragfunnel search``: FunnelRAG's
    three stages (BM25 over clusters, ``pre_ranker`` over documents, ``post_ranker``'s attention over
    passages), or with ``funnel=False`` flat dense search over the passage vectors (``index --flat``).

    An index named by its directory is opened (and verified) once per process, and a funnel's rankers are
    loaded once per pair of rankers, so retrievers that call this per query do not pay for either again. The
    sizes go to each search as arguments: the kept funnel is shared, and no call changes it.

    An index whose vectors come from an embeddings server is refused unless ``remote_embedder`` names that
    server (its ``openai:URL#MODEL``): queries and ``OPENAI_API_KEY`` go only where the caller says."""
    question = check_question(question)
    if exact and funnel:
        raise ConfigError("exact goes with flat search (funnel=False): the funnel searches no passage vectors")
    if not funnel:
        return flat_search(_opened(_index_key(index), remote_embedder), question, top_k, exact=exact)
    retriever = _funnel(_index_key(index), pre_ranker, post_ranker, remote_embedder)
    return retriever.search(question, top_clusters=top_clusters, top_documents=top_documents, top_passages=top_k)


def _index_key(index: CorpusIndex | str | Path) -> CorpusIndex | str:
    return index if isinstance(index, CorpusIndex) else str(Path(index).resolve())


@lru_cache(maxsize=8)
def _opened(index: CorpusIndex | str, remote_embedder: str | None) -> CorpusIndex:
    return index if isinstance(index, CorpusIndex) else CorpusIndex(index, remote_embedder=remote_embedder)


@lru_cache(maxsize=8)
def _funnel(index: CorpusIndex | str, pre_ranker: str, post_ranker: str, remote_embedder: str | None
            ) -> FunnelRetriever:
    from ragfunnel.retrieve.attention import load_post_ranker

    _, retriever = open_funnel(_opened(index, remote_embedder), pre_ranker=pre_ranker,
                               post_ranker=load_post_ranker(post_ranker), top_clusters=None, top_documents=8)
    return retriever
