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
    # Heading of the question; None: the row's input is shown as written, carrying its own label and cue
    # (LongBench's few-shot sets end it with "Type:", "Summary:", ...; repobench-p's is code to continue).
    question_label: str | None = "Question"
    default_question: str | None = None  # asked when a row has no question (a report to summarise)
    cue: str = "Answer:"  # ends a direct-answer prompt; "" when the input ends with its own
    verbatim: bool = False  # the reply is kept as written, indentation included (code)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"task {self.task!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
