"""LangChain components: a retriever over a ragfunnel index, and a Runnable that answers with FB-RAG (or
any context method) over the documents it is given, citing them.

    from langchain_core.runnables import RunnablePassthrough
    chain = ({"documents": RagfunnelRetriever(index="indexes/wiki"), "question": RunnablePassthrough()}
             | RagfunnelAnswer(method="fb"))
    chain.invoke("Who kept the Gull Rock light?")   # {"answer": ..., "confidence": ..., "citations": [...]}
"""

from __future__ import annotations

from typing import Any

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import Runnable, RunnableConfig
except ImportError as e:  # pragma: no cover - the extra is missing
    from ragfunnel.errors import MissingExtra

    raise MissingExtra(e.name or "langchain-core", "langchain") from None

from ragfunnel import answer_located, make_method, search
from ragfunnel.documents import LocatedContext, SourceDocument


class RagfunnelRetriever(BaseRetriever):
    """The ``top_k`` passages of a ragfunnel index (``ragfunnel index``) for a query: FunnelRAG's three
    stages, or flat dense search (``funnel=False``). ``search_options`` go to :func:`ragfunnel.search`
    (``top_documents``, ``pre_ranker``, ``post_ranker`` ...)."""

    index: str
    top_k: int = 4
    funnel: bool = True
    search_options: dict[str, Any] = {}

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        found = search(self.index, query, top_k=self.top_k, funnel=self.funnel, **self.search_options)
        return [Document(page_content=hit.text, id=hit.id,
                         metadata={"source": hit.title or hit.id, "title": hit.title, "score": hit.score})
                for hit in found.results]


class RagfunnelAnswer(Runnable[dict, dict]):
    """Answers ``{"question": str, "documents": [Document, ...] | str}`` with a ragfunnel context method
    (``fb`` by default; ``options`` are its keyword options, e.g. ``strong=``, ``budget=``), and returns
    ``{"answer", "confidence", "method", "citations"}``; each citation names its document by
    ``metadata["source"]`` (else its position)."""

    def __init__(self, method: str = "fb", **options: Any):
        self.method_name = method
        self.method = make_method(method, **options)

    def invoke(self, input: dict, config: RunnableConfig | None = None, **kwargs: Any) -> dict:
        question, given = input["question"], input.get("documents", input.get("context"))
        if isinstance(given, str):
            located = LocatedContext.of_text(given)
        else:
            located = LocatedContext.join([
                SourceDocument.of_text(str(d.metadata.get("source") or f"document {i + 1}"), d.page_content)
                for i, d in enumerate(given or [])])
        prediction = answer_located(self.method, question, located)
        return {"answer": prediction.answer, "confidence": prediction.confidence, "method": prediction.method,
                "citations": [c.to_dict() for c in prediction.citations]}
