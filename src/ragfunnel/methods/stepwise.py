"""Stepwise reading: a question that takes several hops, read over one long context one step at a time.

A small reader given a bridge question in one go tends to answer its first hop ("Where was the 1995 champion
born?" -> the champion's name). Here it runs the self-ask chain IterDRAG runs over a corpus
(:mod:`ragfunnel.methods.self_ask_chain`), with the context's chunks as its passages: the question reads the
chunks the shared ranking puts first within ``budget`` tokens, each follow-up the best chunks not read yet
within ``step_budget`` more, and the final answer is written from the answered steps. Three short worked
examples go first (:mod:`ragfunnel.prompts.reader_shots`): a bridge question, a comparison read one option per
follow-up, and a question answered at once.
"""

from __future__ import annotations

from ragfunnel.errors import ConfigError, option
from ragfunnel.llm import resolve
from ragfunnel.methods.base import Configured, as_prediction, check_budget, check_fits, prepare, ranked
from ragfunnel.methods.config import StepwiseConfig
from ragfunnel.methods.self_ask_chain import ChainSettings, reason
from ragfunnel.prompts import answer_tokens
from ragfunnel.prompts.reader_shots import READER_SHOTS
from ragfunnel.prompts.self_ask import Shot
from ragfunnel.retrieve.fusion import rank
from ragfunnel.retrieve.ranking import question_scores
from ragfunnel.types import Chunk, Document, Prediction, ScoredChunk


class ContextPassages:
    """A context's chunks as a chain's passages: each query ranks them by the shared ranking and gets the best
    chunks no earlier query got, within ``first_budget`` tokens for the first query and ``later_budget`` after."""

    def __init__(self, chunks: list[Chunk], sizes: list[int], *, first_budget: int, later_budget: int):
        self.chunks, self.sizes, self.size = chunks, sizes, len(chunks)
        self.by_id = {c.id: c for c in chunks}
        self.first_budget, self.later_budget = first_budget, later_budget
        self.given: set[int] = set()
        self.question_ranking: list[ScoredChunk] = []  # every chunk by the first query's scores, best first

    def search(self, query: str) -> list[tuple[Document, float]]:
        scores = question_scores(query, self.chunks)
        if not self.question_ranking:
            self.question_ranking = ranked(self.chunks, scores)
        budget = self.later_budget if self.given else self.first_budget
        picked, used = [], 0
        for i in rank(scores).tolist():
            if i in self.given or used + self.sizes[i] > budget:
                continue
            picked.append(i)
            used += self.sizes[i]
        self.given.update(picked)
        picked.sort()  # in the document's order within a step, as OP-RAG shows them
        return [(Document(self.chunks[i].id, "", self.chunks[i].text), float(scores[i])) for i in picked]


class Stepwise(Configured[StepwiseConfig]):
    """Self-ask over the context's chunks: follow-up -> read its best chunks -> intermediate answer ... -> final."""

    name = "stepwise"
    config_type = StepwiseConfig

    @property
    def settings(self) -> ChainSettings:
        c = self.config
        return ChainSettings(c.iterations, c.max_tokens, answer_tokens(c.task), task=c.task)

    @property
    def shots(self) -> list[Shot]:
        """The worked examples the reader is shown first (none unless ``worked_examples``)."""
        return list(READER_SHOTS) if self.config.worked_examples else []

    def run(self, question: str, context: str, *, choices: list[str] | None = None) -> Prediction:
        c = self.config
        if choices is not None:
            raise ConfigError(f"stepwise answers open questions and takes no {option('choices')}; use "
                              f"{option('method')} op or fb for a multiple-choice question")
        question, chunks = prepare(question, context, words=c.chunk_words)
        llm = resolve(self.strong)
        whole = c.budget + c.iterations * c.step_budget  # the most a chain reads, in its last call
        check_fits(llm, budget=whole, task=c.task, question=question, max_tokens=self.settings.final_tokens)
        sizes = check_budget(chunks, budget=min(c.budget, c.step_budget), llm=llm)
        passages = ContextPassages(chunks, sizes, first_budget=c.budget, later_budget=c.step_budget)
        chain = reason(question, passages, llm, self.shots, self.settings,
                       retrieve_detail={"budget": c.budget, "step_budget": c.step_budget})
        read = [ScoredChunk(passages.by_id[d.id], chain.scores[d.id]) for d in chain.context]
        # Citations and the report read the chunks in the document's order, as the other context methods give them.
        read.sort(key=lambda sc: sc.chunk.position)
        return as_prediction(self.name, chain.final, read, chain.trace.stages, ranking=passages.question_ranking,
                             hop_answers=[step.answer for step in chain.steps])
