"""Plain dataclasses passed between stages. Validation lives in ``__post_init__``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ragfunnel.errors import ConfigError, InputError


@dataclass(frozen=True)
class Chunk:
    """A window of a document. ``position`` is its index in document order."""

    id: str
    text: str
    doc_id: str
    position: int
    n_words: int
    start: int | None = None  # its first character's offset in the context it was cut from, where known

    def __post_init__(self) -> None:
        if self.position < 0:
            raise InputError(f"chunk {self.id!r} has negative position {self.position}")


@dataclass(frozen=True)
class Document:
    """A titled passage or article of a corpus (or of an example's own context)."""

    id: str
    title: str
    text: str
    links: tuple[str, ...] = ()  # titles of the documents this one links to (hyperlinks), if known
    position: int | None = field(default=None, compare=False)  # its row in the corpus index it was read from

    def render(self) -> str:
        """How a document appears inside a context: its title on a line, then its text."""
        return f"{self.title}\n{self.text.strip()}" if self.title else self.text.strip()

    @property
    def n_words(self) -> int:
        return len(self.title.split()) + len(self.text.split())


@dataclass(frozen=True)
class ScoredChunk:
    """A chunk with the score that selected it (higher is better)."""

    chunk: Chunk
    score: float


@dataclass(frozen=True)
class Example:
    """One question to answer, with its context (provided-context tasks) and gold answers."""

    id: str
    question: str
    context: str | None = None
    answers: list[str] = field(default_factory=list)
    choices: list[str] | None = None
    task: str = "qa"
    meta: dict[str, Any] = field(default_factory=dict)
    # The passages ``context`` was joined from, when the dataset gives them separately
    # (lets a long context be built around them: ragfunnel.eval.long_context.lengthen).
    passages: list[Document] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.question.strip():
            raise InputError(f"example {self.id!r} has an empty question; give every example a question")


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    seed: int = 0
    grammar: str | None = None  # GBNF text constraining the output, where the backend supports it
    # Characters at the start of the prompt that do not depend on the question (instructions and
    # document): backends that can keep the model's state after them for later prompts do so.
    # It never changes the output, so the call cache leaves it out of its keys.
    keep_prefix: int = 0

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if self.keep_prefix < 0:
            raise ConfigError(f"keep_prefix must be >= 0, got {self.keep_prefix}")
        if self.grammar is not None and not self.grammar.strip():
            raise ConfigError("grammar is empty; pass GBNF text, or None for unconstrained output")


@dataclass(frozen=True)
class Completion:
    """What one LLM call returned for one sample."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    finish_reason: str = "stop"
    cached: bool = False  # served by the call cache; ``seconds`` is then the lookup's, not the model's
    # The model's log-probability of each token of ``text`` (of its first ``len(logprobs)`` tokens);
    # empty where the backend gives none (sampled drafts, servers that refuse logprobs).
    logprobs: tuple[float, ...] = ()


@dataclass(frozen=True)
class Sample:
    """A light-model draft used for forward lookup: its raw text and the parsed parts."""

    text: str
    rationale: str
    answer: str


@dataclass(frozen=True)
class _Listeners:
    done: Callable[[StageTrace], None]
    started: Callable[[str], None] | None


_stage_listeners: ContextVar[_Listeners | None] = ContextVar("stage_listeners", default=None)
_stage_detail: ContextVar[tuple[tuple[str, Any], ...]] = ContextVar("stage_detail", default=())


@contextmanager
def on_stage(done: Callable[[StageTrace], None], *, started: Callable[[str], None] | None = None) -> Iterator[None]:
    """Inside the block, in this thread: call ``done`` with every stage a method finishes (the very object its
    trace keeps, complete) and ``started`` with the name of every stage it begins (:func:`stage` sends both).
    The server streams them."""
    token = _stage_listeners.set(_Listeners(done, started))
    try:
        yield
    finally:
        _stage_listeners.reset(token)


@contextmanager
def stage_detail(**extra: Any) -> Iterator[None]:
    """Every stage finished inside the block carries ``extra`` in its detail (``auto`` names the rung that
    ran it), set before anyone sees the stage."""
    token = _stage_detail.set((*_stage_detail.get(), *extra.items()))
    try:
        yield
    finally:
        _stage_detail.reset(token)


class Stage(StrEnum):
    """Every stage a method or a step after it reports, by the name its trace and its events carry."""

    RETRIEVE = "retrieve"  # the question's chunks or passages under the shared ranking, or an index's documents
    RECALL = "stage1_recall"  # FB-RAG's stage I: the light model's large candidate set
    FORWARD = "stage2_forward"  # FB-RAG's stage II: the light model's drafts re-score every chunk
    FB_ANSWER = "stage3_generate"  # FB-RAG's stage III: the strong model answers from the precise context
    GENERATE = "generate"  # one model answers from what the method retrieved
    GENERATE_OR_DECLINE = "generate_or_decline"  # Self-Route's first answer, which may decline
    STEP = "step"  # one step of a self-ask chain, numbered from 1 (``Stage.STEP.numbered(2)``: "step2")
    FINAL = "final"  # a self-ask chain's final answer, asked for outright
    REASK = "reask"  # ``auto``'s second reading when its answer fails its question's check
    CHOOSE = "choose"  # ``auto`` picks its first method
    ESCALATE = "escalate"  # ``auto``'s ladder: which rungs ran, which answered
    CONFIDENCE = "confidence"  # the answer's signals and calibrated confidence
    ABSTAIN = "abstain"  # the answer withheld under a confidence threshold
    CLUSTERS = "retrieval"  # the funnel's stage 1: BM25 over clusters of linked documents
    PRE_RANKING = "pre_ranking"  # the funnel's stage 2: the pre-ranker over documents
    POST_RANKING = "post_ranking"  # the funnel's stage 3: the post-ranker over passages
    FLAT_DENSE = "flat_dense"  # flat dense search over an index's passages

    def numbered(self, n: int) -> str:
        return f"{self.value}{n}"


@contextmanager
def stage(name: Stage | str, *, n_in: int = 0, detail: dict[str, Any] | None = None) -> Iterator[StageTrace]:
    """Run a stage: listeners hear that it begins, the block fills in the trace it is given (tokens, counts,
    detail), and when the block ends the trace is timed and reported done, once, complete. A block that raises
    reports nothing: the stage did not finish. ``name`` is a :class:`Stage` (or a numbered step)."""
    listeners = _stage_listeners.get()
    if listeners is not None and listeners.started is not None:
        listeners.started(str(name))
    trace = StageTrace(name=str(name), n_in=n_in, detail=dict(detail or {}))
    started = time.perf_counter()
    yield trace
    trace.seconds += time.perf_counter() - started
    trace.detail.update(dict(_stage_detail.get()))
    listeners = _stage_listeners.get()
    if listeners is not None:
        listeners.done(trace)


@dataclass
class StageTrace:
    """What one stage of a method cost and kept."""

    name: str
    seconds: float = 0.0
    llm_seconds: float = 0.0  # the part of ``seconds`` spent inside LLM calls
    input_tokens: int = 0
    output_tokens: int = 0
    n_in: int = 0
    n_out: int = 0
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "seconds": round(self.seconds, 3), "llm_seconds": round(self.llm_seconds, 3),
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "n_in": self.n_in,
                "n_out": self.n_out, "detail": self.detail}


@dataclass
class Trace:
    stages: list[StageTrace] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.stages)

    @property
    def input_tokens(self) -> int:
        """Effective context length: LLM input tokens summed over every call."""
        return sum(s.input_tokens for s in self.stages)

    @property
    def output_tokens(self) -> int:
        return sum(s.output_tokens for s in self.stages)

    @property
    def llm_seconds(self) -> float:
        return sum(s.llm_seconds for s in self.stages)

    def stage(self, name: str) -> StageTrace:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage named {name!r}; stages are {[s.name for s in self.stages]}")


def page_text(page: int, label: str | None) -> str:
    """``p. 12``, or ``p. 12 (xii)`` where the page prints another number than its place."""
    return f"p. {page}" + (f" ({label})" if label and label != str(page) else "")


def place_label(*, page: int | None = None, page_label: str | None = None, heading: str | None = None,
                sheet: str | None = None, row: int | None = None, slide: int | None = None,
                lines: tuple[int, int] | None = None) -> str:
    """How a citation names a place in its file: ``Q3 · row 14``, ``slide 7``, ``p. 12 (xii) "Chapter 2"``,
    ``lines 3–9`` (lines only where nothing else places it); empty when nothing does."""
    within = [] if page is None else [page_text(page, page_label)]
    within += [f'"{heading}"'] if heading else []
    if lines is not None and page is None and row is None and slide is None:
        first, last = lines
        within.append(f"line {first}" if first == last else f"lines {first}\u2013{last}")
    parts = [sheet or "", "" if row is None else f"row {row}", "" if slide is None else f"slide {slide}",
             " ".join(within)]
    return " \u00b7 ".join(part for part in parts if part)


@dataclass(frozen=True)
class Citation:
    """Where an answer came from: a file, its page or section, and the sentence that best supports the
    answer (``quote`` is ``text[start:end]`` of that file's text, as ragfunnel.documents read it)."""

    file: str
    start: int
    end: int
    quote: str
    page: int | None = None
    page_label: str | None = None
    section: str | None = None
    lines: tuple[int, int] | None = None  # 1-based, for plain text and Markdown
    sheet: str | None = None  # a spreadsheet's sheet
    row: int | None = None  # the row's number in its sheet (as the spreadsheet numbers it) or CSV file
    slide: int | None = None  # 1-based, in a slide deck

    def label(self) -> str:
        """``[moby-dick.epub · "Chapter 16. The Ship."]``, ``[paper.pdf · p. 12 (xii)]``,
        ``[notes.txt · lines 3–9]``, ``[sales.xlsx · Q3 · row 14]``, ``[deck.pptx · slide 7]``."""
        where = place_label(page=self.page, page_label=self.page_label, heading=self.section, sheet=self.sheet,
                            row=self.row, slide=self.slide, lines=self.lines)
        return f"[{self.file}" + (f" \u00b7 {where}" if where else "") + "]"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "page": self.page, "page_label": self.page_label, "section": self.section,
                "sheet": self.sheet, "row": self.row, "slide": self.slide,
                "lines": list(self.lines) if self.lines else None, "start": self.start, "end": self.end,
                "quote": self.quote, "label": self.label()}


@dataclass
class Prediction:
    answer: str
    method: str
    chunks_used: list[ScoredChunk]
    trace: Trace
    samples: list[Sample] = field(default_factory=list)
    raw_output: str = ""
    # Every chunk of the context, best first, under the scores that chose the context
    # (empty when nothing was ranked: long context, or a context that fit the budget whole).
    ranking: list[ScoredChunk] = field(default_factory=list)
    # The estimated probability that ``answer`` is right (ragfunnel.confidence), and the signals it was
    # computed from; None when no calibration covers this answer (summaries, or no calibration file).
    confidence: float | None = None
    signals: dict[str, float] = field(default_factory=dict)
    # Whether the confidence reaches the calibration's ``supported_at`` (False: more likely wrong than the
    # user should take on trust); None without a confidence.
    supported: bool | None = None
    # The greedy answer's completion (token log-probabilities; the prompt a judge question follows).
    completion: Completion | None = field(default=None, repr=False, compare=False)
    prompt: str = field(default="", repr=False, compare=False)
    # Where the answer came from in the user's files (ragfunnel.documents.cite), best-supporting first.
    citations: list[Citation] = field(default_factory=list)
    # Why there are no citations although chunks were read ("no passage read states this answer").
    citation_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (the CLI's ``--json`` output)."""
        return {
            "answer": self.answer,
            "method": self.method,
            "chunks_used": [
                {
                    "id": sc.chunk.id,
                    "position": sc.chunk.position,
                    "score": round(float(sc.score), 6),
                    "n_words": sc.chunk.n_words,
                    "text": sc.chunk.text,
                }
                for sc in self.chunks_used
            ],
            "confidence": None if self.confidence is None else round(self.confidence, 4),
            "supported": self.supported,
            "signals": {k: round(v, 4) for k, v in self.signals.items()},
            "citations": [c.to_dict() for c in self.citations],
            "citation_note": self.citation_note,
            "samples": [{"text": s.text, "rationale": s.rationale, "answer": s.answer} for s in self.samples],
            "ranking": [{"position": sc.chunk.position, "score": round(float(sc.score), 6)} for sc in self.ranking],
            "trace": {
                "seconds": round(self.trace.seconds, 3),
                "llm_seconds": round(self.trace.llm_seconds, 3),
                "input_tokens": self.trace.input_tokens,
                "output_tokens": self.trace.output_tokens,
                "stages": [s.to_dict() for s in self.trace.stages],
            },
            "raw_output": self.raw_output,
        }
