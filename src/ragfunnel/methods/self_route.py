"""Self-Route (Li et al., 2024): order-preserving RAG that may say "unanswerable", then long context."""

from __future__ import annotations

from ragfunnel.llm import resolve
from ragfunnel.methods.base import as_prediction, check_fits, generate_answer, prepare, retrieve_by_query
from ragfunnel.methods.config import AnswerConfig
from ragfunnel.methods.long_context import LongContext
from ragfunnel.methods.vanilla import VanillaRAG
from ragfunnel.prompts import is_unanswerable
from ragfunnel.types import Prediction, Stage, stage


class SelfRoute(VanillaRAG):
    """Step 1: the strong model answers from retrieved chunks or declines. Step 2 (on decline): LC."""

    name = "self-route"
    keep_document_order = True

    def run(self, question: str, context: str, *, choices: list[str] | None = None) -> Prediction:
        question, chunks = prepare(question, context, words=self.config.chunk_words)
        llm = resolve(self.strong)
        check_fits(llm, budget=self.config.budget, task=self.config.task, question=question,
                   max_tokens=self.config.max_tokens)
        found = retrieve_by_query(question, chunks, budget=self.config.budget, llm=llm)
        with stage(Stage.GENERATE_OR_DECLINE, n_in=len(found.kept)) as s:
            first = generate_answer(s, llm, task=self.config.task, variant="unanswerable", question=question,
                                    chunks=[sc.chunk for sc in found.kept], choices=choices,
                                    max_tokens=self.config.max_tokens)
            declined = is_unanswerable(first.answer)
            s.detail["route"] = "long_context" if declined else "rag"
        if not declined:
            return as_prediction(self.name, first, found.kept, [found.stage, first.stage], ranking=found.ranking)
        lc = LongContext(self.config.narrowed(AnswerConfig), strong=llm).run(
            question, context, choices=choices)
        lc.trace.stages = [found.stage, first.stage, *lc.trace.stages]
        lc.method = self.name
        lc.ranking = found.ranking
        return lc
