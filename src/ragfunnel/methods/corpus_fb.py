"""FB-RAG over a corpus index: FunnelRAG's first two stages (BM25 over clusters, then the pre-ranker over
their documents) give Stage I's candidates; FB-RAG reads them as one context, each document its own chunks,
and the strong model answers with citations of the documents it read."""

from __future__ import annotations

from pathlib import Path

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.documents import LocatedContext, SourceDocument, cited
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG
from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import check_question
from ragfunnel.methods.config import CorpusFBConfig, FBConfig
from ragfunnel.methods.fbrag import FBRAG
from ragfunnel.methods.funnel import open_funnel
from ragfunnel.types import Prediction, Trace


class CorpusFBRAG:
    """``ask --index DIR --method fb``: retrieval -> pre-ranking (documents) -> FB-RAG over them."""

    name = "fb"

    def __init__(self, config: CorpusFBConfig | None = None, light: str | LLM = DEFAULT_LIGHT,
                 strong: str | LLM = DEFAULT_STRONG, *, index: CorpusIndex | str | Path):
        self.config = c = (config or CorpusFBConfig()).resolved()
        self.index, self.retriever = open_funnel(index, pre_ranker=c.pre_ranker, post_ranker=None,
                                                 top_clusters=c.top_clusters, top_documents=c.top_documents)
        drafting = c.narrowed(FBConfig).changed(draft_from="selection")
        self.fb = FBRAG(drafting, light=light, strong=strong)

    def run(self, question: str, *, choices: list[str] | None = None) -> Prediction:
        question = check_question(question)
        doc_ids, retrieval = self.retriever.retrieve(question)
        documents, pre_ranking = self.retriever.pre_rank(question, doc_ids)
        located = LocatedContext.join([SourceDocument.of_text(d.title or d.id, d.render(), format="corpus")
                                       for d in documents])
        prediction = self.fb.run(question, located.text, choices=choices)
        prediction.trace = Trace([retrieval, pre_ranking, *prediction.trace.stages])
        prediction.citations, prediction.citation_note = cited(prediction, located, question)
        return prediction

