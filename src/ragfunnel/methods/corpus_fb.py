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
from ragfunnel.methods.fbrag import FBRAG
from ragfunnel.methods.funnel import open_funnel
from ragfunnel.retrieve.rerank import DEFAULT_PRE_RANKER, PreRanker
from ragfunnel.text.chunking import CHUNK_WORDS
from ragfunnel.types import Prediction, Trace


class CorpusFBRAG:
    """``ask --index DIR --method fb``: retrieval -> pre-ranking (documents) -> FB-RAG over them."""

    name = "fb"

    def __init__(
        self,
        *,
        index: CorpusIndex | str | Path,
        light: str | LLM = DEFAULT_LIGHT,
        strong: str | LLM = DEFAULT_STRONG,
        pre_ranker: str | PreRanker = DEFAULT_PRE_RANKER,
        task: str = "qa",
        top_clusters: int | None = None,
        top_documents: int = 20,
        budget: int = 1500,
        stage1_budget: int | None = None,
        samples: int = 5,
        chunk_words: int = CHUNK_WORDS,
        seed: int = 0,
    ):
        self.index, self.retriever = open_funnel(index, pre_ranker=pre_ranker, post_ranker=None,
                                                 top_clusters=top_clusters, top_documents=top_documents)
        self.fb = FBRAG(light=light, strong=strong, task=task, budget=budget, stage1_budget=stage1_budget,
                        samples=samples, chunk_words=chunk_words, seed=seed, draft_from="selection")

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

