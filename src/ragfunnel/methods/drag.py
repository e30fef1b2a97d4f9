"""DRAG, demonstration-based RAG over a corpus index (the inference-scaling paper, section 3.2).

One LLM call reads ``shots`` solved training questions, each with the ``documents`` retrieved
for its own question, then the test question's ``documents`` and the question. Compute grows
with both: the prompt's tokens are the effective context length. The pieces IterDRAG shares
(checking the options, refusing choices, documents as chunks) live here too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.errors import ConfigError
from ragfunnel.llm import DEFAULT_STRONG, resolve
from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import Generation, as_prediction, check_question, timed_call
from ragfunnel.methods.demonstrations import Demonstration, check_shots, load_demonstrations
from ragfunnel.prompts import answer_tokens, clean_answer
from ragfunnel.prompts.self_ask import Shot, display_order, drag_prompt
from ragfunnel.prompts.templates import TASKS, check_task
from ragfunnel.types import Chunk, Document, Prediction, ScoredChunk, StageTrace

log = logging.getLogger(__name__)

OPEN_TASKS = ("qa", "multihop")


@dataclass(frozen=True)
class Options:
    """The options DRAG and IterDRAG share, checked."""

    index: CorpusIndex
    documents: int
    demonstrations: list[Demonstration]  # the ones shown: the first ``shots``
    task: str


def check_options(
    index: CorpusIndex | str | Path,
    documents: int,
    shots: int,
    demonstrations: Sequence[Demonstration] | str | Path,
    task: str,
) -> Options:
    if documents < 0:
        raise ConfigError(f"--documents (k) must be >= 0, got {documents}")
    if check_task(task) not in OPEN_TASKS:
        raise ConfigError(f"DRAG and IterDRAG answer open questions; task {task!r} is not one of "
                          f"{', '.join(OPEN_TASKS)}")
    demos = load_demonstrations(demonstrations) if isinstance(demonstrations, str | Path) else list(demonstrations)
    return Options(index if isinstance(index, CorpusIndex) else CorpusIndex(index), documents,
                   check_shots(demos, shots), task)


def refuse_choices(method: str, choices: list[str] | None) -> None:
    """DRAG and IterDRAG answer open questions: options to choose from have no place in their prompts."""
    if choices is not None:
        raise ConfigError(f"{method} answers open questions and takes no choices (--choice); "
                          "--method funnel answers multiple-choice questions from an index")


def as_chunks(documents: Sequence[Document], scores: dict[str, float]) -> list[ScoredChunk]:
    """Documents (in the order shown) as the chunks a Prediction reports, with their retrieval scores."""
    return [ScoredChunk(Chunk(id=d.id, text=d.render(), doc_id=d.id, position=i, n_words=d.n_words),
                        scores.get(d.id, 0.0))
            for i, d in enumerate(documents)]


class DRAG:
    """Demonstrations with their documents, then the test documents (best nearest the question), one call."""

    name = "drag"

    def __init__(
        self,
        *,
        index: CorpusIndex | str | Path,
        strong: str | LLM = DEFAULT_STRONG,
        documents: int = 5,
        shots: int = 0,
        demonstrations: Sequence[Demonstration] | str | Path = (),
        task: str = "multihop",
        max_tokens: int | None = None,
    ):
        self.options = check_options(index, documents, shots, demonstrations, task)
        self.strong = strong
        self.max_tokens = max_tokens or answer_tokens(task)
        self._shots: list[Shot] | None = None  # the same for every question: retrieved once

    def shots(self) -> list[Shot]:
        if self._shots is None:
            o = self.options
            self._shots = [d.shot(o.index, o.documents, self_ask=False) for d in o.demonstrations]
        return self._shots

    def run(self, question: str, *, choices: list[str] | None = None) -> Prediction:
        refuse_choices(self.name, choices)
        question = check_question(question)
        o = self.options
        started = time.perf_counter()
        hits = o.index.search_documents(question, o.documents)
        shots = self.shots()
        retrieve = StageTrace(name="retrieve", seconds=time.perf_counter() - started, n_in=len(o.index),
                              n_out=len(hits), detail={"documents": o.documents, "shots": len(shots)})
        shown = display_order([[d for d, _ in hits]])
        llm = resolve(self.strong)
        log.info("drag: %s reads %d shot(s) and %d document(s)", llm.name, len(shots), len(shown))
        prompt = drag_prompt(question, shown, shots, style=TASKS[o.task].style)
        completion, stage = timed_call(llm, prompt, stage="generate", max_tokens=self.max_tokens)
        stage.n_in = len(shown)
        stage.detail["largest_prompt_tokens"] = completion.prompt_tokens
        answer = clean_answer(completion.text)
        if not answer:
            log.warning("%s returned an empty answer", llm.name)
        chunks = as_chunks(shown, {d.id: s for d, s in hits})
        return as_prediction(self.name, Generation(answer, completion, stage), chunks, [retrieve, stage],
                             ranking=chunks[::-1])
