"""FunnelRAG over a corpus index: progressive retrieval, then the strong model answers from the passages."""

from __future__ import annotations

from pathlib import Path

from ragfunnel.corpus.funnel import FunnelRetriever
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, resolve
from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import as_prediction, check_question, generate_answer
from ragfunnel.methods.config import FunnelConfig
from ragfunnel.retrieve.attention import PostRanker, load_post_ranker
from ragfunnel.retrieve.rerank import PreRanker, load_pre_ranker
from ragfunnel.text.chunking import count_words
from ragfunnel.types import Chunk, Prediction, ScoredChunk, Stage, stage


def open_funnel(index: CorpusIndex | str | Path, *, pre_ranker: str | PreRanker, post_ranker: PostRanker | None,
                top_clusters: int | None, top_documents: int, top_passages: int = 4
                ) -> tuple[CorpusIndex, FunnelRetriever]:
    """The index (opened from its directory if need be) and a funnel over it; a pre-ranker named by spec
    uses the index's stored document vectors and embedder."""
    index = index if isinstance(index, CorpusIndex) else CorpusIndex(index)
    if isinstance(pre_ranker, str):
        pre_ranker = load_pre_ranker(pre_ranker, stored=index.document_vectors, embedder=index.embedder)
    return index, FunnelRetriever(index, pre_ranker=pre_ranker, post_ranker=post_ranker, top_clusters=top_clusters,
                                  top_documents=top_documents, top_passages=top_passages)


class FunnelRAG:
    """Retrieval (BM25 clusters) -> pre-ranking (documents) -> post-ranking (passages) -> answer."""

    name = "funnel"

    def __init__(self, config: FunnelConfig | None = None, light: str | LLM = DEFAULT_LIGHT,
                 strong: str | LLM = DEFAULT_STRONG, *, index: CorpusIndex | str | Path):
        """``light`` is not read: the post-ranker is ``config.post_ranker`` (by default the same 0.5B)."""
        self.config = c = (config or FunnelConfig()).resolved()
        self.strong = strong
        post_ranker = load_post_ranker(c.post_ranker) if isinstance(c.post_ranker, str) else c.post_ranker
        self.index, self.retriever = open_funnel(
            index, pre_ranker=c.pre_ranker, top_clusters=c.top_clusters, top_documents=c.top_documents,
            post_ranker=post_ranker, top_passages=c.top_passages)

    def run(self, question: str, *, choices: list[str] | None = None) -> Prediction:
        question = check_question(question)
        found = self.retriever.search(question)
        passages = [ScoredChunk(Chunk(id=f"{h.id}#{rank}", text=f"{h.title}\n{h.text}" if h.title else h.text,
                                      doc_id=h.id, position=rank, n_words=count_words(h.text)), h.score)
                    for rank, h in enumerate(found.results)]
        with stage(Stage.GENERATE, n_in=len(passages)) as s:
            gen = generate_answer(s, resolve(self.strong), task=self.config.task, variant="plain", question=question,
                                  chunks=[p.chunk for p in passages], choices=choices,
                                  max_tokens=self.config.max_tokens)
        return as_prediction(self.name, gen, passages, [*found.stages, gen.stage], ranking=passages)
