"""Pieces every method is built from: chunking, budgeted selection, one timed LLM call."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import ClassVar, Generic, TypeVar

import numpy as np

from ragfunnel.confidence import assess
from ragfunnel.declared import Config
from ragfunnel.errors import ConfigError, InputError, option
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG
from ragfunnel.llm.base import LLM
from ragfunnel.prompts import TASKS, build_prompt, chosen_option, clean_answer, prompt_prefix, task_kind
from ragfunnel.retrieve.document_cache import chunk_tokens, document_chunks
from ragfunnel.retrieve.fusion import rank
from ragfunnel.retrieve.ranking import question_scores
from ragfunnel.text import check_context
from ragfunnel.text.hygiene import clean_text
from ragfunnel.types import Chunk, Completion, Prediction, SamplingParams, ScoredChunk, Stage, StageTrace, Trace, stage

log = logging.getLogger(__name__)
C = TypeVar("C", bound=Config)

# Room kept free in the window beyond prompt and answer: chat-template tokens and rounding.
WINDOW_MARGIN = 64


def check_question(question: str) -> str:
    """The question without surrounding blank lines; a first line's indentation stays (code to continue)."""
    if not question or not question.strip():
        raise InputError("the question is empty; pass the question to answer")
    return clean_text(question, source="the question").lstrip("\n").rstrip()


def prepare(question: str, context: str, *, words: int) -> tuple[str, list[Chunk]]:
    """Validate the inputs and cut the context into word windows (kept per document:
    :mod:`ragfunnel.retrieve.document_cache`)."""
    return check_question(question), document_chunks(check_context(context), words=words)


def join_chunks(chunks: list[Chunk]) -> str:
    return "\n\n".join(c.text for c in chunks)


def total_tokens(chunks: list[Chunk], llm: LLM) -> int:
    return sum(chunk_tokens(chunks, llm))


def ranked(chunks: list[Chunk], scores: np.ndarray, *, tiebreak: np.ndarray | None = None) -> list[ScoredChunk]:
    """Every chunk with its score, best first (the order :func:`select_within_budget` takes them in)."""
    return [ScoredChunk(chunks[i], float(scores[i])) for i in rank(scores, tiebreak=tiebreak)]


def check_budget(chunks: list[Chunk], *, budget: int, llm: LLM) -> list[int]:
    """Each chunk's tokens under ``llm``; an error if ``budget`` cannot hold a typical chunk.

    Methods call it before any model generates, so a hopeless budget costs nothing.
    """
    sizes = chunk_tokens(chunks, llm)
    typical = int(median(sizes))
    words = median(c.n_words for c in chunks)
    if budget < typical / words:  # one word alone overflows: fewer words per chunk cannot help
        raise InputError(
            f"the context's words are about {typical / words:,.0f} tokens each, more than the budget of {budget} "
            "tokens: the text has (almost) no spaces to cut it at; pass text with words separated by spaces, "
            f"or raise {option('budget')}"
        )
    if budget < typical:
        raise InputError(
            f"the context budget of {budget} tokens is smaller than one chunk (a typical chunk here is "
            f"{typical} tokens); raise {option('budget')} or lower {option('chunk_words')}"
        )
    return sizes


def select_within_budget(
    chunks: list[Chunk],
    scores: np.ndarray,
    *,
    budget: int,
    llm: LLM,
    tiebreak: np.ndarray | None = None,
) -> list[ScoredChunk]:
    """Best-scoring chunks whose tokens (under ``llm``'s tokenizer) fit ``budget``, in document order.

    Chunks are taken greedily by score; one that would overflow the budget is skipped so
    a smaller, lower-ranked chunk can still fill the space.
    """
    sizes = check_budget(chunks, budget=budget, llm=llm)
    chosen, used = [], 0
    for i in rank(scores, tiebreak=tiebreak):
        if used + sizes[i] <= budget:
            chosen.append(ScoredChunk(chunks[i], float(scores[i])))
            used += sizes[i]
    return sorted(chosen, key=lambda sc: sc.chunk.position)


def check_fits(llm: LLM, *, budget: int, task: str, question: str, max_tokens: int) -> None:
    """Refuse a budget that cannot fit the model's window with the prompt and the answer."""
    overhead = llm.count_tokens(build_prompt(task, "rationale", question=question, context="",
                                             choices=["x"] if task_kind(task) == "choice" else None))
    need = budget + overhead + max_tokens + WINDOW_MARGIN
    if need > llm.context_window:
        raise ConfigError(
            f"a budget of {budget} tokens needs a {need}-token window but {llm.name} has "
            f"{llm.context_window}; lower the budget"
        )


@dataclass(frozen=True)
class Generation:
    """One answered prompt and the stage record it produced; ``llm``, ``prompt``, ``task`` and ``question``
    let the answer be assessed (:func:`ragfunnel.confidence.assess`)."""

    answer: str
    completion: Completion
    stage: StageTrace
    llm: LLM | None = None
    prompt: str = ""
    task: str = ""
    question: str = ""
    choices: list[str] | None = None


class Configured(Generic[C]):
    """What every method starts from: its configuration, resolved (:meth:`Config.resolved`), kept as
    ``method.config``, and its two models, by spec or object (resolved when a question first needs them). A
    method that does not read one of them still takes it: every method takes the same three arguments."""

    config_type: ClassVar[type]  # the configuration built when none is given

    def __init__(self, config: C | None = None, light: str | LLM = DEFAULT_LIGHT, strong: str | LLM = DEFAULT_STRONG):
        self.config: C = (config or self.config_type()).resolved()
        self.light, self.strong = light, strong


def recorded_call(
    trace: StageTrace,
    llm: LLM,
    prompt: str,
    *,
    max_tokens: int,
    grammar: str | None = None,
    stop: tuple[str, ...] = (),
    keep_prefix: int = 0,
) -> Completion:
    """One greedy call, recorded on the open stage ``trace`` (tokens, model seconds, model, finish reason,
    prompt reuse)."""
    params = SamplingParams(max_tokens=max_tokens, stop=stop, grammar=grammar, keep_prefix=keep_prefix)
    completion = llm.generate([prompt], params)[0][0]
    trace.llm_seconds += completion.seconds
    trace.input_tokens += completion.prompt_tokens
    trace.output_tokens += completion.completion_tokens
    trace.n_out = 1
    trace.detail.update({"model": llm.name, "weights": llm.fingerprint, "finish_reason": completion.finish_reason,
                         "cached": completion.cached, **prefix_detail(llm, completion, keep_prefix)})
    return completion


def prefix_detail(llm: LLM, completion: Completion, keep_prefix: int) -> dict:
    """Where the model's state after the document came from (read now, or kept from an earlier read)."""
    if not keep_prefix or completion.cached:
        return {}
    return dict(llm.last_prefix)


def generate_answer(
    trace: StageTrace,
    llm: LLM,
    *,
    task: str,
    variant: str,
    question: str,
    chunks: list[Chunk],
    choices: list[str] | None,
    max_tokens: int,
    keep_document: bool = False,
) -> Generation:
    """Greedy answer from ``llm`` over ``chunks`` (already in the order to show), recorded on the open stage
    ``trace``. ``keep_document``: the model keeps its state after reading the chunks, for later questions."""
    log.info("%s: %s reads %d chunk(s) and answers", trace.name, llm.name, len(chunks))
    context = join_chunks(chunks)
    prompt = build_prompt(task, variant, question=question, context=context, choices=choices)
    keep = len(prompt_prefix(task, context)) if keep_document else 0
    completion = recorded_call(trace, llm, prompt, max_tokens=max_tokens, keep_prefix=keep)
    t = TASKS[task]
    answer = completion.text.lstrip("\n").rstrip() if t.verbatim else clean_answer(completion.text,
                                                                                    first_line=t.first_line)
    if choices:  # the option's own text, not its letter
        answer = chosen_option(answer, choices) or answer
    if not answer:
        log.warning("%s returned an empty answer", llm.name)
    return Generation(answer, completion, trace, llm=llm, prompt=prompt, task=task, question=question,
                      choices=choices)


def as_prediction(method: str, gen: Generation, chunks: list[ScoredChunk], stages: list[StageTrace],
                  *, light_answer: str | None = None, hop_answers: Sequence[str] | None = None,
                  **kwargs) -> Prediction:
    """The method's prediction, with its confidence when ``gen`` says what it answered (task and question).
    ``light_answer``: the light model's answer over the same context, when one was written; ``hop_answers``:
    the intermediate answers of the step-wise chain that wrote it, in order, when one did."""
    p = Prediction(answer=gen.answer, method=method, chunks_used=chunks, trace=Trace(stages),
                   raw_output=gen.completion.text, completion=gen.completion, prompt=gen.prompt, **kwargs)
    if not gen.task:
        return p
    return assess(p, llm=gen.llm, task=gen.task, question=gen.question, choices=gen.choices,
                  light_answer=light_answer, hop_answers=hop_answers or ())


@dataclass(frozen=True)
class Retrieval:
    kept: list[ScoredChunk]  # in document order
    ranking: list[ScoredChunk]  # every chunk, best first
    stage: StageTrace


def retrieve_by_query(question: str, chunks: list[Chunk], *, budget: int, llm: LLM) -> Retrieval:
    """The top chunks for ``question`` under the shared ranking (:func:`ragfunnel.retrieve.ranking.question_scores`:
    BM25 and MiniLM) within ``budget`` tokens of ``llm``, in document order.

    When the whole context already fits the budget nothing is dropped and the trace says so.
    """
    with stage(Stage.RETRIEVE, n_in=len(chunks)) as trace:
        whole = total_tokens(chunks, llm)
        scores = question_scores(question, chunks)
        if whole <= budget:
            kept = [ScoredChunk(c, float(s)) for c, s in zip(chunks, scores, strict=True)]
            trace.detail["skipped"] = (f"the whole context ({whole} tokens) fits the budget ({budget}); "
                                       "no retrieval needed")
        else:
            kept = select_within_budget(chunks, scores, budget=budget, llm=llm)
            trace.detail.update(budget=budget, context_tokens=whole,
                                kept_tokens=sum(llm.count_tokens(sc.chunk.text) for sc in kept))
        trace.n_out = len(kept)
    return Retrieval(kept, ranked(chunks, scores), trace)
