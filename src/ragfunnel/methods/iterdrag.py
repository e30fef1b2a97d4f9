"""IterDRAG, iterative demonstration-based RAG (the inference-scaling paper, section 3.3).

Self-ask over a corpus index (:mod:`ragfunnel.methods.self_ask_chain`, the chain ``stepwise`` runs over a long
context too): the question and each follow-up retrieve ``documents`` more documents, merged into the context
without repeats, and the model writes one line per call until its final answer.
"""

from __future__ import annotations

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.llm import resolve
from ragfunnel.methods.base import as_prediction, check_question
from ragfunnel.methods.config import IterDragConfig
from ragfunnel.methods.drag import Demonstrated, as_chunks, refuse_choices
from ragfunnel.methods.self_ask_chain import ChainSettings, SelfAskChain, reason
from ragfunnel.prompts import answer_tokens
from ragfunnel.types import Document, Prediction


class _IndexPassages:
    """A corpus index as a chain's passage source: each query's ``k`` best documents (BM25)."""

    def __init__(self, index: CorpusIndex, k: int):
        self.index, self.k, self.size = index, k, len(index)

    def search(self, query: str) -> list[tuple[Document, float]]:
        return self.index.search_documents(query, self.k)


class IterDRAG(Demonstrated):
    """Self-ask with retrieval: follow-up -> retrieve and merge -> intermediate answer ... -> final answer."""

    name = "iterdrag"
    config_type = IterDragConfig
    self_ask = True

    def run(self, question: str, *, choices: list[str] | None = None) -> Prediction:
        refuse_choices(self.name, choices)
        chain = self.reason(question)
        context = as_chunks(chain.context, chain.scores)
        return as_prediction(self.name, chain.final, context, chain.trace.stages,
                             ranking=sorted(context, key=lambda sc: -sc.score))

    def reason(self, question: str) -> SelfAskChain:
        """Run the self-ask loop on ``question`` and return the whole chain."""
        o = self.options
        shots = self.shots()
        # No task on the chain: IterDRAG's answers are scored by the grid, not given a confidence.
        settings = ChainSettings(self.config.iterations, self.config.max_tokens, answer_tokens(o.task))
        return reason(check_question(question), _IndexPassages(o.index, o.documents), resolve(self.strong), shots,
                      settings, retrieve_detail={"documents": o.documents, "shots": len(shots)})
