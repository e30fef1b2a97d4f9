"""Vanilla RAG: the top chunks under the shared ranking (BM25 and MiniLM) within a token budget, best first."""

from __future__ import annotations

from ragfunnel.llm import resolve
from ragfunnel.methods.base import (
    Configured,
    as_prediction,
    check_fits,
    generate_answer,
    prepare,
    retrieve_by_query,
)
from ragfunnel.methods.config import RetrievalConfig
from ragfunnel.types import Prediction, Stage, stage


class VanillaRAG(Configured[RetrievalConfig]):
    """Retrieve by the shared ranking, show chunks in score order, answer with the strong model."""

    name = "vanilla"
    config_type = RetrievalConfig
    keep_document_order = False

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
