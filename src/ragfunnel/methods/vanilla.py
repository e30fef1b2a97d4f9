"""Vanilla RAG: the top chunks under the shared ranking (BM25 and MiniLM) within a token budget, best first."""

from __future__ import annotations

from ragfunnel.llm import DEFAULT_STRONG, resolve
from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import (
    as_prediction,
    check_fits,
    generate_answer,
    prepare,
    retrieve_by_query,
)
from ragfunnel.prompts import answer_tokens, check_task
from ragfunnel.text.chunking import CHUNK_WORDS
from ragfunnel.types import Prediction


class VanillaRAG:
    """Retrieve by the shared ranking, show chunks in score order, answer with the strong model."""

    name = "vanilla"
    keep_document_order = False

    def __init__(
        self,
        *,
        strong: str | LLM = DEFAULT_STRONG,
        task: str = "qa",
        budget: int = 1500,
        chunk_words: int = CHUNK_WORDS,
        max_tokens: int | None = None,
    ):
        self.strong = strong
        self.task = check_task(task)
        self.budget = budget
        self.chunk_words = chunk_words
        self.max_tokens = max_tokens or answer_tokens(task)

    def run(self, question: str, context: str, *, choices: list[str] | None = None) -> Prediction:
        question, chunks = prepare(question, context, words=self.chunk_words)
        llm = resolve(self.strong)
        check_fits(llm, budget=self.budget, task=self.task, question=question, max_tokens=self.max_tokens)
        found = retrieve_by_query(question, chunks, budget=self.budget, llm=llm)
        kept = found.kept if self.keep_document_order else sorted(found.kept, key=lambda sc: -sc.score)
        gen = generate_answer(llm, stage="generate", task=self.task, variant="plain", question=question,
                              chunks=[sc.chunk for sc in kept], choices=choices, max_tokens=self.max_tokens)
        return as_prediction(self.name, gen, kept, [found.stage, gen.stage], ranking=found.ranking)
