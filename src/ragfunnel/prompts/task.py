"""What a task prompt is made of; the tasks themselves are in ``templates`` and ``longbench``."""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("qa", "summary", "choice")  # how answers are shaped, cleaned and scored by default


@dataclass(frozen=True)
class TaskPrompt:
    task: str
    intro: str  # what the reader is given and must do
    text_label: str  # heading above the context
    ask: str  # restated next to the question
    style: str  # how short the answer should be
    kind: str = "qa"
    answer_tokens: int = 32  # the final answer's token limit
    first_line: bool = True  # the answer is the reply's first non-empty line
    question_label: str = "Question"
    default_question: str | None = None  # asked when a row has no question (a report to summarise)
