"""Vanilla RAG: the top chunks under the shared ranking (BM25 and MiniLM) within a token budget, best first."""

from __future__ import annotations

from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, resolve
from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import (
    as_prediction,
    check_fits,
    generate_answer,
    prepare,
    retrieve_by_query,
)
from ragfunnel.methods.config import RetrievalConfig
from ragfunnel.types import Prediction, Stage, stage


class VanillaRAG:
    """Retrieve by the shared ranking, show chunks in score order, answer with the strong model."""

    name = "vanilla"
    keep_document_order = False

    def __init__(self, config: RetrievalConfig | None = None, light: str | LLM = DEFAULT_LIGHT,
                 strong: str | LLM = DEFAULT_STRONG):
        """``light`` is not read: every method takes the same three arguments."""
        self.config = (config or RetrievalConfig()).resolved()
        self.strong = strong

    def run(self, question: str, context: str, *, choices: list[str] | None = None) -> Prediction:
        question, chunks = prepare(question, context, words=self.config.chunk_words)
        llm = resolve(self.strong)
        check_fits(llm, budget=self.config.budget, task=self.config.task, question=question,
                   max_tokens=self.config.max_tokens)
        found = retrieve_by_query(question, chunks, budget=self.config.budget, llm=llm)
        kept = found.kept if self.keep_document_order else sorted(found.kept, key=lambda sc: -sc.score)
        with stage(Stage.GENERATE, n_in=len(kept)) as s:
            gen = generate_answer(s, llm, task=self.config.task, variant="plain", question=question,
                                  chunks=[sc.chunk for sc in kept], choices=choices, max_tokens=self.config.max_tokens)
        return as_prediction(self.name, gen, kept, [found.stage, gen.stage], ranking=found.ranking)
