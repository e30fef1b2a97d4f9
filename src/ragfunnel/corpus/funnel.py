"""FunnelRAG's progressive retrieval over a corpus index: fewer, finer units, stronger scorers.

Stage 1, retrieval:    BM25 over the index's clusters of linked documents; keep the top K clusters.
Stage 2, pre-ranking:  split those clusters into their documents; a pre-ranker scores each
                       document against the question; keep the top N documents.
Stage 3, post-ranking: split those documents into passages ("later chunking"); a post-ranker
                       (generator attention) scores them together; keep the top H passages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.errors import ConfigError
from ragfunnel.retrieve.attention import PostRanker
from ragfunnel.retrieve.fusion import best_k
from ragfunnel.retrieve.rerank import PreRanker
from ragfunnel.text import word_windows
from ragfunnel.types import Document, Stage, StageTrace, stage


@dataclass(frozen=True)
class Hit:
    """A retrieved unit: the document it belongs to and its text (a passage, or the whole document)."""

    id: str
    title: str
    text: str
    score: float


@dataclass
class SearchResult:
    results: list[Hit]
    stages: list[StageTrace]

    def to_dict(self) -> dict[str, Any]:
        """The JSON view shown by `ragfunnel search --json` and the server's /v1/search."""
        return {"results": [{"id": h.id, "title": h.title, "text": h.text, "score": round(h.score, 6)}
                            for h in self.results],
                "stages": [{"name": s.name, "seconds": round(s.seconds, 4), "n_in": s.n_in, "n_out": s.n_out,
                            **({"search": s.detail["search"]} if "search" in s.detail else {})}  # flat: exact or FAISS
                           for s in self.stages]}


def flat_search(index: CorpusIndex, question: str, top_k: int, *, exact: bool = False) -> SearchResult:
    """Flat dense retrieval over the index's passages (an index built with ``--flat``): through its FAISS
    index when it has one, else (or with ``exact``) exact search over every passage vector."""
    with stage(Stage.FLAT_DENSE, n_in=index.manifest.passages,
               detail={"search": "exact" if exact else index.flat_search_kind}) as trace:
        best, scores = index.flat_search(question, top_k, exact=exact)
        hits = []
        for position, score in zip(best, scores, strict=True):
            doc, text = index.passage(int(position))
            hits.append(Hit(doc.id, doc.title, text, float(score)))
        trace.n_out = len(hits)
    return SearchResult(hits, [trace])


def default_top_clusters(n_clusters: int) -> int:
    """The paper keeps 80 of ~600K clusters; small corpora keep 5% of theirs (at least 4, at most 80)."""
    return min(80, max(4, math.ceil(0.05 * n_clusters)), n_clusters)


class FunnelRetriever:
    def __init__(
        self,
        index: CorpusIndex,
        *,
        pre_ranker: PreRanker,
        post_ranker: PostRanker | None,  # None: only the first two stages are used
        top_clusters: int | None = None,
        top_documents: int = 8,
        top_passages: int = 4,
        passage_words: int = 100,
        max_passages: int = 24,
    ):
        _check_sizes(top_clusters, top_documents, top_passages, passage_words, max_passages)
        self.index = index
        self.pre_ranker, self.post_ranker = pre_ranker, post_ranker
        self.top_clusters = top_clusters or default_top_clusters(index.n_clusters)
        self.top_documents, self.top_passages = top_documents, top_passages
        self.passage_words, self.max_passages = passage_words, max_passages

    def retrieve(self, question: str, *, top_clusters: int | None = None) -> tuple[list[int], StageTrace]:
        """Stage 1: the documents of the top clusters by BM25, in cluster rank order (``top_clusters`` of them,
        default the retriever's)."""
        _check_sizes(top_clusters)
        with stage(Stage.CLUSTERS, n_in=self.index.n_clusters, detail={"unit": "cluster"}) as trace:
            clusters, _ = self.index.cluster_bm25.top_k(question, top_clusters or self.top_clusters)
            doc_ids = list(dict.fromkeys(i for c in clusters for i in self.index.cluster(int(c))))
            trace.n_out = len(clusters)
            trace.detail["documents"] = len(doc_ids)
        return doc_ids, trace

    def pre_rank(self, question: str, doc_ids: list[int], *,
                 top_documents: int | None = None) -> tuple[list[Document], StageTrace]:
        """Stage 2: the top documents under the pre-ranker, best first (``top_documents`` of them, default the
        retriever's)."""
        _check_sizes(top_documents)
        with stage(Stage.PRE_RANKING, n_in=len(doc_ids),
                   detail={"unit": "document", "ranker": type(self.pre_ranker).__name__}) as trace:
            docs = [self.index.document(i) for i in doc_ids]
            best, _ = best_k(self.pre_ranker.score(question, docs), top_documents or self.top_documents)
            kept = [docs[int(i)] for i in best]
            trace.n_out = len(kept)
        return kept, trace

    def passages(self, documents: list[Document]) -> list[tuple[Document, str]]:
        """Later chunking: each document cut into passages, best document's first, up to ``max_passages``."""
        passages = [(d, d.text[a:b]) for d in documents for a, b in word_windows(d.text, self.passage_words)]
        return passages[:self.max_passages]  # they share one prompt: the lowest-ranked documents' go first

    def post_scores(self, question: str, passages: list[tuple[Document, str]]) -> np.ndarray:
        """Stage 3's score of every passage (generator attention)."""
        return self.post_ranker.score(question, [f"{d.title}\n{t}" for d, t in passages])

    def search(self, question: str, *, top_clusters: int | None = None, top_documents: int | None = None,
               top_passages: int | None = None) -> SearchResult:
        """The three stages. Sizes given here hold for this search alone (None: the retriever's own), so one
        retriever, rankers loaded, serves searches of any size and is never changed by one."""
        _check_sizes(top_passages)
        doc_ids, stage1 = self.retrieve(question, top_clusters=top_clusters)
        kept, stage2 = self.pre_rank(question, doc_ids, top_documents=top_documents)
        with stage(Stage.POST_RANKING, detail={"unit": "passage", "ranker": type(self.post_ranker).__name__}) as stage3:
            passages = self.passages(kept)
            best, scores = best_k(self.post_scores(question, passages), top_passages or self.top_passages)
            hits = [Hit(passages[int(i)][0].id, passages[int(i)][0].title, passages[int(i)][1], float(s))
                    for i, s in zip(best, scores, strict=True)]
            stage3.n_in, stage3.n_out = len(passages), len(hits)
        return SearchResult(hits, [stage1, stage2, stage3])


def _check_sizes(*sizes: int | None) -> None:
    """Funnel sizes given (None is not given) are whole numbers of at least 1."""
    if any(size is not None and size < 1 for size in sizes):
        raise ConfigError("funnel sizes (clusters, documents, passages, passage words) must be at least 1")
