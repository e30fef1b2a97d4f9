"""DRAG, demonstration-based RAG over a corpus index (the inference-scaling paper, section 3.2).

One LLM call reads ``shots`` solved training questions, each with the ``documents`` retrieved
for its own question, then the test question's ``documents`` and the question. Compute grows
with both: the prompt's tokens are the effective context length. The pieces IterDRAG shares
(checking the options, refusing choices, documents as chunks) live here too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.errors import ConfigError, option
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG, resolve
from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import Generation, as_prediction, check_question, recorded_call
from ragfunnel.methods.config import DragConfig
from ragfunnel.methods.demonstrations import Demonstration, check_shots, load_demonstrations
from ragfunnel.prompts import clean_answer
from ragfunnel.prompts.self_ask import Shot, display_order, drag_prompt
from ragfunnel.prompts.templates import TASKS
from ragfunnel.types import Chunk, Document, Prediction, ScoredChunk, Stage, stage

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Options:
    """The options DRAG and IterDRAG share, checked."""

    index: CorpusIndex
    documents: int
    demonstrations: list[Demonstration]  # the ones shown: the first ``shots``
    task: str


def check_options(config: DragConfig, index: CorpusIndex | str | Path) -> Options:
    """The index opened and the demonstrations read (and their number checked): once, before any question."""
    demos = config.demonstrations
    demos = load_demonstrations(demos) if isinstance(demos, str | Path) else list(demos)
    return Options(index if isinstance(index, CorpusIndex) else CorpusIndex(index), config.documents,
                   check_shots(demos, config.shots), config.task)


def refuse_choices(method: str, choices: list[str] | None) -> None:
    """DRAG and IterDRAG answer open questions: options to choose from have no place in their prompts."""
    if choices is not None:
        raise ConfigError(f"{method} answers open questions and takes no {option('choices')}; "
                          f"{option('method')} funnel answers multiple-choice questions from an index")


def as_chunks(documents: Sequence[Document], scores: dict[str, float]) -> list[ScoredChunk]:
    """Documents (in the order shown) as the chunks a Prediction reports, with their retrieval scores."""
    return [ScoredChunk(Chunk(id=d.id, text=d.render(), doc_id=d.id, position=i, n_words=d.n_words),
                        scores.get(d.id, 0.0))
            for i, d in enumerate(documents)]


class Demonstrated:
    """A corpus method that shows solved examples, each with the documents retrieved for it, before the question:
    :class:`DRAG` (documents only) and IterDRAG (with their self-ask steps)."""

    config_type: ClassVar[type[DragConfig]]
    self_ask: ClassVar[bool]  # the shots show their follow-ups and intermediate answers

    def __init__(self, config: DragConfig | None = None, light: str | LLM = DEFAULT_LIGHT,
                 strong: str | LLM = DEFAULT_STRONG, *, index: CorpusIndex | str | Path):
        """``light`` is not read: every method takes the same three arguments."""
        self.config = c = (config or self.config_type()).resolved()
        self.options = check_options(c, index)
        self.strong = strong
        self._shots: list[Shot] | None = None  # the same for every question: retrieved once

    def shots(self) -> list[Shot]:
        if self._shots is None:
            o = self.options
            self._shots = [d.shot(o.index, o.documents, self_ask=self.self_ask) for d in o.demonstrations]
        return self._shots


class DRAG(Demonstrated):
    """Demonstrations with their documents, then the test documents (best nearest the question), one call."""

    name = "drag"
    config_type = DragConfig
    self_ask = False

    def run(self, question: str, *, choices: list[str] | None = None) -> Prediction:
        refuse_choices(self.name, choices)
        question = check_question(question)
        o = self.options
        with stage(Stage.RETRIEVE, n_in=len(o.index), detail={"documents": o.documents}) as retrieve:
            hits = o.index.search_documents(question, o.documents)
            shots = self.shots()
            retrieve.n_out = len(hits)
            retrieve.detail["shots"] = len(shots)
        shown = display_order([[d for d, _ in hits]])
        llm = resolve(self.strong)
        log.info("drag: %s reads %d shot(s) and %d document(s)", llm.name, len(shots), len(shown))
        prompt = drag_prompt(question, shown, shots, style=TASKS[o.task].style)
        with stage(Stage.GENERATE, n_in=len(shown)) as generate:
            completion = recorded_call(generate, llm, prompt, max_tokens=self.config.max_tokens)
            generate.detail["largest_prompt_tokens"] = completion.prompt_tokens
        answer = clean_answer(completion.text)
        if not answer:
            log.warning("%s returned an empty answer", llm.name)
        chunks = as_chunks(shown, {d.id: s for d, s in hits})
        return as_prediction(self.name, Generation(answer, completion, generate), chunks, [retrieve, generate],
                             ranking=chunks[::-1])
