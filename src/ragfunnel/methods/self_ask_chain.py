"""The self-ask chain that IterDRAG runs over a corpus index and ``stepwise`` over one long context.

Each LLM call writes one line: a follow-up question, the intermediate answer to the last follow-up, or the
final answer (a GBNF grammar holds the model to the line the chain allows, and the parser copes where the
backend ignores it). The question, then each follow-up, asks the chain's :class:`PassageSource` for passages,
merged into the context without repeats, and the next call must answer the follow-up. After ``iterations``
follow-ups, or a reply that breaks the chain (empty, out of turn, or a follow-up already answered), the final
answer is asked for outright, and the trace says it was forced. Every call's input tokens count toward the
effective context length (``trace.input_tokens``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import Generation, recorded_call
from ragfunnel.methods.demonstrations import SelfAskStep
from ragfunnel.metrics import normalize_answer
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
from ragfunnel.types import Document, Stage, StageTrace, Trace, stage

log = logging.getLogger(__name__)


class PassageSource(Protocol):
    """Where a chain's passages come from: ``search`` gives the passages for a query, best first, with their
    scores; ``size`` is how many it holds (what a retrieval stage reports it read)."""

    size: int

    def search(self, query: str) -> list[tuple[Document, float]]: ...


@dataclass(frozen=True)
class ChainSettings:
    """How a chain runs: ``iterations`` follow-ups at most, ``step_tokens`` a line, ``final_tokens`` the forced
    final answer; ``task`` and ``question`` are recorded on the final answer so it can be assessed."""

    iterations: int
    step_tokens: int
    final_tokens: int
    task: str = ""


@dataclass(frozen=True)
class SelfAskChain:
    """What one chain went through (the material of a self-ask demonstration)."""

    question: str
    answer: str
    documents: tuple[Document, ...]  # retrieved for the question, best first
    steps: tuple[SelfAskStep, ...]  # the answered follow-ups, each with what it retrieved
    forced: bool  # the final answer had to be asked for
    context: list[Document]  # every passage of the last call, in the order shown
    scores: dict[str, float]  # each passage's score from the retrieval that first found it
    final: Generation  # the call that gave the final answer
    trace: Trace


def _repeats(follow_up: str, steps: list[SelfAskStep]) -> bool:
    return normalize_answer(follow_up) in {normalize_answer(s.follow_up) for s in steps}


def _chain_totals(stages: list[StageTrace], asked: int, *, forced: bool) -> dict:
    """What the chain's last stage records of the whole chain (``stages`` holds the last one)."""
    return {"largest_prompt_tokens": max(s.input_tokens for s in stages[1:]), "follow_ups": asked, "forced": forced}


def reason(question: str, source: PassageSource, llm: LLM, shots: list[Shot], settings: ChainSettings,
           *, retrieve_detail: dict | None = None) -> SelfAskChain:
    """Run the self-ask loop on ``question`` (already checked) over ``source`` and return the whole chain."""
    with stage(Stage.RETRIEVE, n_in=source.size, detail={"query": question, **(retrieve_detail or {})}) as retrieve:
        first = source.search(question)
        retrieve.n_out = len(first)
    stages = [retrieve]
    scores = {d.id: s for d, s in first}
    batches = [[d for d, _ in first]]
    steps: list[SelfAskStep] = []
    pending: SelfAskStep | None = None  # a follow-up and its passages, awaiting the intermediate answer
    asked, final, stuck = 0, None, False
    while final is None and not stuck and (pending is not None or asked < settings.iterations):
        context = display_order(batches)
        prompt = iterdrag_prompt(question, context, shots, [FollowUp(s.follow_up, s.answer) for s in steps],
                                 pending=pending.follow_up if pending else None)
        with stage(Stage.STEP.numbered(len(stages)), n_in=len(context)) as trace:
            completion = recorded_call(trace, llm, prompt, max_tokens=settings.step_tokens,
                                       grammar=INTERMEDIATE_GRAMMAR if pending else STEP_GRAMMAR, stop=STEP_STOP)
            step = parse_step(completion.text, after_follow_up=pending is not None)
            trace.detail.update(kind=step.kind, text=step.text, prefixed=step.prefixed,
                                context_documents=len(context), reply=completion.text)
            stages.append(trace)
            if step.kind == "final" and step.text:
                final = Generation(step.text, completion, trace, llm=llm, prompt=prompt, task=settings.task,
                                   question=question)
                trace.detail.update(_chain_totals(stages, asked, forced=False))
            elif pending is not None and step.kind == "intermediate" and step.text:
                steps.append(SelfAskStep(pending.follow_up, step.text, pending.documents))
                pending = None
            elif pending is None and step.kind == "follow_up" and step.text and not _repeats(step.text, steps):
                pending = _follow_up(source, step.text, batches, scores, trace)
                asked += 1
            else:
                # Empty, out of turn (no grammar held the model), or a follow-up already answered
                # (it would retrieve the same passages and get the same answer): the chain is stuck.
                log.warning("self-ask: %s wrote %r where the chain allows %s; asking for the final answer",
                            llm.name, completion.text[:80], "an intermediate answer" if pending else
                            "a new follow-up or the final answer")
                trace.detail["broke_chain"] = stuck = True
    context = display_order(batches)
    forced = final is None
    if final is None:
        final = _force_final(llm, question, context, shots, steps, stages, settings, asked)
    return SelfAskChain(question, final.answer, tuple(batches[0]), tuple(steps), forced, context, scores, final,
                        Trace(stages))


def _follow_up(source: PassageSource, query: str, batches: list[list[Document]], scores: dict[str, float],
               trace: StageTrace) -> SelfAskStep:
    """Retrieve for a follow-up and merge the new passages into the context (recorded on the open ``trace``)."""
    before = len(display_order(batches))
    found = source.search(query)
    batches.append([d for d, _ in found])
    for d, s in found:
        scores.setdefault(d.id, s)
    trace.detail.update(query=query, documents_added=len(display_order(batches)) - before)
    return SelfAskStep(query, "", tuple(d for d, _ in found))


def _force_final(llm: LLM, question: str, context: list[Document], shots: list[Shot], steps: list[SelfAskStep],
                 stages: list[StageTrace], settings: ChainSettings, asked: int) -> Generation:
    """Ask for the final answer outright: the prompt ends with the final-answer prefix."""
    prompt = iterdrag_prompt(question, context, shots, [FollowUp(s.follow_up, s.answer) for s in steps],
                             force_final=True)
    with stage(Stage.FINAL, n_in=len(context)) as trace:
        completion = recorded_call(trace, llm, prompt, max_tokens=settings.final_tokens, grammar=FINAL_GRAMMAR)
        answer = parse_final(completion.text)
        trace.detail.update(kind="final", text=answer, context_documents=len(context), reply=completion.text)
        stages.append(trace)
        trace.detail.update(_chain_totals(stages, asked, forced=True))
    if not answer:
        log.warning("%s returned an empty final answer", llm.name)
    return Generation(answer, completion, trace, llm=llm, prompt=prompt, task=settings.task, question=question)
