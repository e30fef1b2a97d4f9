"""LlamaIndex components: a retriever over a ragfunnel index, and a node postprocessor that re-ranks
retrieved nodes with FB-RAG's forward lookup (the light model drafts answers from the nodes; each node is
scored again against the drafts and fused with its score against the question).

    engine = RetrieverQueryEngine.from_args(RagfunnelRetriever("indexes/wiki", top_k=20), llm=...,
                                            node_postprocessors=[FBRAGReranker(top_n=5)])
"""

from __future__ import annotations

from typing import Any

try:
    from llama_index.core.bridge.pydantic import Field
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as e:  # pragma: no cover - the extra is missing
    from ragfunnel.errors import MissingExtra

    raise MissingExtra(e.name or "llama-index-core", "llamaindex") from None

from ragfunnel import Chunk, search
from ragfunnel.llm import DEFAULT_LIGHT, resolve
from ragfunnel.methods import FBRAG, FBConfig


class RagfunnelRetriever(BaseRetriever):
    """The ``top_k`` passages of a ragfunnel index for a query, as scored nodes (FunnelRAG's three stages,
    or flat dense search with ``funnel=False``); ``search_options`` go to :func:`ragfunnel.search`."""

    def __init__(self, index: str, *, top_k: int = 4, funnel: bool = True, **search_options: Any):
        super().__init__()
        self.index, self.top_k, self.funnel, self.search_options = index, top_k, funnel, search_options

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = search(self.index, query_bundle.query_str, top_k=self.top_k, funnel=self.funnel,
                       **self.search_options)
        return [NodeWithScore(node=TextNode(text=hit.text, id_=hit.id, metadata={"title": hit.title}),
                              score=hit.score) for hit in found.results]


class FBRAGReranker(BaseNodePostprocessor):
    """Re-ranks nodes by FB-RAG's forward lookup: the ``light`` model reads the best nodes (by BM25 against
    the question, up to ``stage1_budget`` tokens), drafts ``samples`` answers, and every node's score becomes
    its fused question-and-drafts score. Keeps the ``top_n`` best (all by default)."""

    light: str = Field(default=DEFAULT_LIGHT, description="The draft model's spec.")
    samples: int = Field(default=5, description="Drafts K.")
    stage1_budget: int = Field(default=3000, description="Tokens of nodes the drafts read.")
    top_n: int | None = Field(default=None, description="Nodes kept.")
    task: str = Field(default="qa", description="ragfunnel's prompt family.")

    @classmethod
    def class_name(cls) -> str:
        return "FBRAGReranker"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        if not nodes or query_bundle is None:
            return nodes[: self.top_n]
        config = FBConfig(task=self.task, samples=self.samples, stage1_budget=self.stage1_budget,
                          budget=self.stage1_budget, draft_from="selection")
        fb = FBRAG(config, light=self.light)
        chunks = [Chunk(id=n.node.node_id, text=n.node.get_content(), doc_id=n.node.node_id, position=i,
                        n_words=len(n.node.get_content().split())) for i, n in enumerate(nodes)]
        lookup = fb.forward_lookup(query_bundle.query_str, chunks, light=resolve(self.light))
        order = sorted(range(len(nodes)), key=lambda i: (-float(lookup.fused[i]), i))
        return [NodeWithScore(node=nodes[i].node, score=float(lookup.fused[i])) for i in order][: self.top_n]
