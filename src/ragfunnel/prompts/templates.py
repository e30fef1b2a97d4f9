"""Prompt templates per task kind, each in three variants.

``plain``         answer directly (LC, vanilla, OP-RAG, final generation of FB-RAG)
``unanswerable``  answer, or say "unanswerable" when the text lacks it (Self-Route step 1)
``rationale``     a short "Rationale:" line, then an "Answer:" line (FB-RAG Stage II drafts)
``queries``       "Search:" lines naming what to look up, no answer (drafts written as search queries; measured
                  against ``rationale`` in benchmarks/escalation.py)

The structure follows the papers (what the reader is given, the text, the instruction next to
the question, an answer cue); the wording is ragfunnel's own. Every prompt of a task starts with
the same :func:`prompt_prefix` — the task's introduction and the text, nothing that depends on the
question or the variant — so a model that has read a document once can answer every later
question about it, in any variant, from the kept state of that prefix.
"""

from __future__ import annotations

from ragfunnel.errors import ConfigError, option
from ragfunnel.prompts.infbench import INFBENCH_TASKS
from ragfunnel.prompts.longbench import LONGBENCH_TASKS
from ragfunnel.prompts.parsing import option_letters
from ragfunnel.prompts.task import TaskPrompt

_GENERIC = [
    TaskPrompt(
        task="qa",
        intro="You will read a long text and then answer a question about it.",
        text_label="Text",
        ask="Using only the text above, answer the question.",
        style="Reply with the shortest phrase that answers it and nothing else.",
    ),
    TaskPrompt(
        task="multihop",
        intro="You will read several passages and then answer a question; the answer may need "
        "facts from more than one passage.",
        text_label="Passages",
        ask="Using only the passages above, answer the question.",
        style="Reply with the shortest phrase that answers it and nothing else.",
    ),
    TaskPrompt(
        task="summary",
        intro="You will read a long text, such as a meeting transcript, and then write a summary "
        "that responds to a query about it.",
        text_label="Text",
        ask="Using only the text above, write a summary that responds to the query.",
        style="Write a few plain sentences.",
        kind="summary",
        answer_tokens=400,
        first_line=False,
        question_label="Query",
    ),
    TaskPrompt(
        task="choice",
        intro="You will read a long text and then choose the option that answers a question about it.",
        text_label="Text",
        ask="Using only the text above, choose the correct option.",
        style="Reply with the letter of the correct option and nothing else.",
        kind="choice",
        answer_tokens=8,
    ),
]
# The generic tasks first (``--task`` lists them first), then the benchmarks' own.
TASKS: dict[str, TaskPrompt] = {t.task: t for t in _GENERIC} | LONGBENCH_TASKS | INFBENCH_TASKS

VARIANTS = ("plain", "unanswerable", "rationale", "queries")

_UNANSWERABLE = 'If the text does not hold what is needed to answer, reply with the single word "unanswerable".'
_RATIONALE = (
    'First write "Rationale:" and, in two or three sentences, say which parts of the text lead to the '
    'answer. Then write "Answer:" followed by the answer.'
)

_QUERIES = (
    'Do not answer yet. Write two or three search queries, one per line, each starting with "Search:", that name '
    "what must be looked up in the text to answer the question: the people, places, works or events it turns on."
)


def check_task(task: str) -> str:
    if task not in TASKS:
        generic = ", ".join(t.task for t in _GENERIC)
        raise ConfigError(f"unknown task {task!r}; valid tasks: {generic}, {', '.join(INFBENCH_TASKS)}, or "
                          f"longbench/<dataset> ({', '.join(n.removeprefix('longbench/') for n in LONGBENCH_TASKS)})")
    return task


def answer_tokens(task: str) -> int:
    """The final answer's token limit for ``task``."""
    return TASKS[check_task(task)].answer_tokens


def task_kind(task: str) -> str:
    """How ``task``'s answers are shaped and scored: qa, summary or choice."""
    return TASKS[check_task(task)].kind


def prompt_prefix(task: str, context: str) -> str:
    """The question-independent start of every ``task`` prompt over ``context``."""
    t = TASKS[check_task(task)]
    return f"{t.intro}\n\n{t.text_label}:\n{context.strip()}\n\n"


def build_prompt(
    task: str,
    variant: str,
    *,
    question: str,
    context: str,
    choices: list[str] | None = None,
) -> str:
    """The user message for ``task`` in ``variant`` over ``context``."""
    t = TASKS[check_task(task)]
    if variant not in VARIANTS:
        raise ConfigError(f"unknown prompt variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
    if choices is not None and (isinstance(choices, str) or not all(isinstance(c, str) for c in choices)):
        raise ConfigError(f"{option('choices')} must be a list of option strings, got {choices!r}")
    if t.kind == "choice" and not choices:
        raise ConfigError(f"the choice task needs its options ({option('choices')}, one per option)")
    # What to do comes after the text, beside the question, so the text's prefix is shared.
    instruction = {"plain": t.style, "unanswerable": f"{t.style} {_UNANSWERABLE}", "rationale": _RATIONALE,
                   "queries": _QUERIES}[variant]
    shown = question.rstrip() if t.question_label is None else f"{t.question_label}: {question.strip()}"
    lines = [f"{t.ask} {instruction}", shown]
    if choices:
        lines += [f"{letter}. {c}" for letter, c in zip(option_letters(choices), choices, strict=True)]
    cue = {"rationale": "Rationale:", "queries": "Search:"}.get(variant, t.cue)
    return prompt_prefix(task, context) + "\n".join(lines + [cue] if cue else lines)
