"""Long context (LC): the whole text in one prompt, cut in the middle if it overflows the window."""

from __future__ import annotations

import logging
import re

from ragfunnel.llm import resolve
from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import (
    WINDOW_MARGIN,
    Configured,
    as_prediction,
    check_question,
    generate_answer,
)
from ragfunnel.methods.config import AnswerConfig
from ragfunnel.prompts import build_prompt
from ragfunnel.text import check_context
from ragfunnel.text.chunking import count_words
from ragfunnel.types import Chunk, Prediction, ScoredChunk, Stage, stage

log = logging.getLogger(__name__)

_WORD = re.compile(r"\S+")


def truncate_middle(text: str, *, limit: int, llm: LLM) -> tuple[str, int]:
    """Drop words from the middle of ``text`` until it has at most ``limit`` tokens.

    Returns the text and its original token count. The start and end of a long document
    usually carry its framing and conclusions, so the middle goes first.
    """
    original = llm.count_tokens(text)
    if original <= limit:
        return text, original
    spans = [m.span() for m in _WORD.finditer(text)]
    keep_words = int(len(spans) * limit / original)
    while True:
        head, tail = spans[: (keep_words + 1) // 2], spans[len(spans) - keep_words // 2 :]
        cut = text[: head[-1][1]] + "\n...\n" + text[tail[0][0] :] if head and tail else text[: spans[0][1]]
        if llm.count_tokens(cut) <= limit or keep_words <= 1:
            return cut, original
        keep_words = int(keep_words * 0.95)


class LongContext(Configured[AnswerConfig]):
    """Answer from the full context with the strong model."""

    name = "lc"
    config_type = AnswerConfig

    def run(self, question: str, context: str, *, choices: list[str] | None = None) -> Prediction:
        question, context = check_question(question), check_context(context)
        with stage(Stage.GENERATE, n_in=1) as trace:
            llm = resolve(self.strong)
            overhead = llm.count_tokens(build_prompt(self.config.task, "plain", question=question, context="",
                                                     choices=choices))
            limit = llm.context_window - overhead - self.config.max_tokens - WINDOW_MARGIN
            text, original = truncate_middle(context, limit=limit, llm=llm)
            trace.detail["context_tokens"] = original
            if text != context:
                log.warning("context of %d tokens exceeds %s's window; cut to %d tokens in the middle",
                            original, llm.name, limit)
                trace.detail["truncated_to"] = limit
            whole = Chunk(id="context", text=text, doc_id="context", position=0, n_words=count_words(text),
                          start=0 if text == context else None)
            gen = generate_answer(trace, llm, task=self.config.task, variant="plain", question=question, chunks=[whole],
                                  choices=choices, max_tokens=self.config.max_tokens, keep_document=True)
        return as_prediction(self.name, gen, [ScoredChunk(whole, 1.0)], [gen.stage])
