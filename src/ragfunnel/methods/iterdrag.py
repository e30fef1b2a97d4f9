"""IterDRAG, iterative demonstration-based RAG (the inference-scaling paper, section 3.3).

Self-ask over a corpus index. Each LLM call writes one line: a follow-up question, the
intermediate answer to the last follow-up, or the final answer (a GBNF grammar holds the model
to the line the chain allows, and the parser copes where the backend ignores it). A follow-up
retrieves ``documents`` more documents, merged into the context without repeats, and the next
call must answer it. After ``iterations`` follow-ups, or a reply that breaks the chain (empty,
out of turn, or a follow-up already answered), the final answer is asked for outright. Every
call's input tokens count toward the effective context length (``prediction.trace.input_tokens``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, resolve
from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import Generation, as_prediction, check_question, timed_call
from ragfunnel.methods.config import STEP_TOKENS, IterDragConfig
from ragfunnel.methods.demonstrations import SelfAskStep
from ragfunnel.methods.drag import as_chunks, check_options, refuse_choices
from ragfunnel.metrics import normalize_answer
from ragfunnel.prompts import answer_tokens
from ragfunnel.prompts.self_ask import (
    FINAL_GRAMMAR,
    INTERMEDIATE_GRAMMAR,
    STEP_GRAMMAR,
    STEP_STOP,
    FollowUp,
    Shot,
    display_order,
    iterdrag_prompt,
    parse_final,
    parse_step,
)
from ragfunnel.types import Document, Prediction, ScoredChunk, StageTrace, Trace, stage_done

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class SelfAskChain:
    """What one IterDRAG answer went through (the material of a self-ask demonstration)."""

    question: str
    answer: str
    documents: tuple[Document, ...]  # retrieved for the question, best first
    steps: tuple[SelfAskStep, ...]  # the answered follow-ups, each with what it retrieved
    forced: bool  # the final answer had to be asked for
    context: list[ScoredChunk]  # every document of the last call, in the order shown
    final: Generation  # the call that gave the final answer
    trace: Trace


def _repeats(follow_up: str, steps: list[SelfAskStep]) -> bool:
    return normalize_answer(follow_up) in {normalize_answer(s.follow_up) for s in steps}


def _report(stages: list[StageTrace], reported: int) -> int:
    """Report the stages after the first ``reported`` (:func:`~ragfunnel.types.stage_done`); how many now are."""
    for stage in stages[reported:]:
        stage_done(stage)
    return len(stages)


class IterDRAG:
    """Self-ask with retrieval: follow-up -> retrieve and merge -> intermediate answer ... -> final answer."""

    name = "iterdrag"

    def __init__(self, config: IterDragConfig | None = None, light: str | LLM = DEFAULT_LIGHT,
                 strong: str | LLM = DEFAULT_STRONG, *, index: CorpusIndex | str | Path):
        """``light`` is not read: every method takes the same three arguments."""
        self.config = c = config or IterDragConfig()
        self.options = check_options(c, index)
        self.strong = strong
        self.iterations = c.iterations
        self.max_tokens = c.max_tokens or STEP_TOKENS
        self._shots: list[Shot] | None = None  # the same for every question: retrieved once

    def shots(self) -> list[Shot]:
        if self._shots is None:
            o = self.options
            self._shots = [d.shot(o.index, o.documents, self_ask=True) for d in o.demonstrations]
        return self._shots

    def run(self, question: str, *, choices: list[str] | None = None) -> Prediction:
        refuse_choices(self.name, choices)
        chain = self.reason(question)
        return as_prediction(self.name, chain.final, chain.context, chain.trace.stages,
                             ranking=sorted(chain.context, key=lambda sc: -sc.score))

    def reason(self, question: str) -> SelfAskChain:
        """Run the self-ask loop on ``question`` and return the whole chain."""
        question = check_question(question)
        o, llm = self.options, resolve(self.strong)
        started = time.perf_counter()
        first = o.index.search_documents(question, o.documents)
        shots = self.shots()
        stages = [stage_done(StageTrace(name="retrieve", seconds=time.perf_counter() - started, n_in=len(o.index),
                                        n_out=len(first), detail={"query": question, "documents": o.documents,
                                                                  "shots": len(shots)}))]
        reported = 1  # stages[:reported] are reported: a step is, once nothing will change it
        scores = {d.id: s for d, s in first}
        batches = [[d for d, _ in first]]
        steps: list[SelfAskStep] = []
        pending: SelfAskStep | None = None  # a follow-up and its documents, awaiting the intermediate answer
        asked, answer, final = 0, "", None
        while pending is not None or asked < self.iterations:
            context = display_order(batches)
            prompt = iterdrag_prompt(question, context, shots, [FollowUp(s.follow_up, s.answer) for s in steps],
                                     pending=pending.follow_up if pending else None)
            completion, stage = timed_call(llm, prompt, stage=f"step{len(stages)}", max_tokens=self.max_tokens,
                                           grammar=INTERMEDIATE_GRAMMAR if pending else STEP_GRAMMAR, stop=STEP_STOP)
            step = parse_step(completion.text, after_follow_up=pending is not None)
            stage.n_in = len(context)
            stage.detail.update(kind=step.kind, text=step.text, prefixed=step.prefixed, context_documents=len(context),
                                reply=completion.text)
            stages.append(stage)
            if step.kind == "final" and step.text:
                answer, final = step.text, Generation(step.text, completion, stage)
                break
            if pending is not None and step.kind == "intermediate" and step.text:
                steps.append(SelfAskStep(pending.follow_up, step.text, pending.documents))
                pending = None
            elif pending is None and step.kind == "follow_up" and step.text and not _repeats(step.text, steps):
                pending = self._follow_up(step.text, batches, scores, stage)
                asked += 1
            else:
                # Empty, out of turn (no grammar held the model), or a follow-up already answered
                # (it would retrieve the same documents and get the same answer): the chain is stuck.
                log.warning("iterdrag: %s wrote %r where the chain allows %s; asking for the final answer",
                            llm.name, completion.text[:80], "an intermediate answer" if pending else
                            "a new follow-up or the final answer")
                stage.detail["broke_chain"] = True
                break
            reported = _report(stages, reported)
        context = display_order(batches)
        forced = final is None
        if final is None:
            reported = _report(stages, reported)
            answer, final = self._force_final(llm, question, context, shots, steps, stages)
        stages[-1].detail.update(largest_prompt_tokens=max(s.input_tokens for s in stages[1:]),
                                 follow_ups=asked, forced=forced)
        _report(stages, reported)
        return SelfAskChain(question, answer, tuple(batches[0]), tuple(steps), forced,
                            as_chunks(context, scores), final, Trace(stages))

    def _follow_up(self, query: str, batches: list[list[Document]], scores: dict[str, float],
                   stage: StageTrace) -> SelfAskStep:
        """Retrieve for a follow-up and merge the new documents into the context (recorded on ``stage``)."""
        started = time.perf_counter()
        before = len(display_order(batches))
        found = self.options.index.search_documents(query, self.options.documents)
        batches.append([d for d, _ in found])
        for d, s in found:
            scores.setdefault(d.id, s)
        stage.seconds += time.perf_counter() - started
        stage.detail.update(query=query, documents_added=len(display_order(batches)) - before)
        return SelfAskStep(query, "", tuple(d for d, _ in found))

    def _force_final(self, llm: LLM, question: str, context: list[Document], shots: list[Shot],
                     steps: list[SelfAskStep], stages: list[StageTrace]) -> tuple[str, Generation]:
        """Ask for the final answer outright: the prompt ends with the final-answer prefix."""
        prompt = iterdrag_prompt(question, context, shots, [FollowUp(s.follow_up, s.answer) for s in steps],
                                 force_final=True)
        completion, stage = timed_call(llm, prompt, stage="final", max_tokens=answer_tokens(self.options.task),
                                       grammar=FINAL_GRAMMAR)
        answer = parse_final(completion.text)
        stage.n_in = len(context)
        stage.detail.update(kind="final", text=answer, context_documents=len(context),
                            reply=completion.text)
        stages.append(stage)
        if not answer:
            log.warning("%s returned an empty final answer", llm.name)
        return answer, Generation(answer, completion, stage)
