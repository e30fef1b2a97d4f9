"""One more read for an answer that does not fit its question: the same passages, the question asked again
with what it wants said out loud.

:func:`~ragfunnel.confidence.answer_check.check_answer` tells when an answer cannot be right whatever the
passages say: a *when* question answered with a country, a question answered with its own words. A small
reader often fixes that once told what kind of answer is wanted, with the passages it already read: the
prompt is the first one with a note after the question, so a backend that keeps the text it last read
(llama.cpp does) reads only the note. The new answer is kept only when it states something and passes
every check; otherwise the first answer stands. The trace holds both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ragfunnel.confidence.answer_check import AnswerCheck, check_answer, comparison_options, declines, question_kind
from ragfunnel.llm.base import LLM
from ragfunnel.methods.base import as_prediction, generate_answer
from ragfunnel.prompts import task_kind
from ragfunnel.types import Prediction, Stage, StageTrace, stage

# What each kind of question wants, as the note says it.
WANTED = {"when": "a date or a year", "how_many": "a number", "where": "a place", "who": "a name",
          "yes_no": "yes or no"}


def wanted(question: str) -> str | None:
    """What ``question`` asks for, in words a reader can act on; None when its kind cannot be told."""
    if options := comparison_options(question):  # "Who was born first, A or B?" as much as "Is A older or B?"
        return f"one of the two it names, {options[0]} or {options[1]}"
    return WANTED.get(question_kind(question) or "")


def note(question: str, answer: str, check: AnswerCheck) -> str:
    """The line added after the question, saying what was wrong with ``answer`` and what is wanted."""
    want = wanted(question)
    if check == "echo":
        return (f'Note: "{answer}" only repeats words of the question. Give what the question asks for'
                f'{f", which is {want}" if want else ""}, as the text states it.')
    return (f'Note: "{answer}" is not {want}, and the question asks for {want}. Answer with {want}, as the text '
            'states it.')


@dataclass(frozen=True)
class Reread:
    """The outcome of :func:`reask`: the prediction to return, and what happened, for the trace."""

    prediction: Prediction
    stages: list[StageTrace]
    record: dict  # {"check", "answer", "kept"}, or {} when the first answer passed


def reask(prediction: Prediction, *, question: str, task: str, llm: LLM, max_tokens: int,
          choices: list[str] | None = None) -> Reread:
    """``prediction`` asked once more over the passages it read when its answer fails a check of its
    question (a choice task's options and a summary are not checked); the first answer when it passes."""
    check = None
    if task_kind(task) not in ("choice", "summary") and prediction.chunks_used:
        check = check_answer(question, prediction.answer)
    if check is None or check == "earlier_hop" or (check == "type" and wanted(question) is None):
        return Reread(prediction, [], {})
    chunks = [sc.chunk for sc in prediction.chunks_used]
    with stage(Stage.REASK, n_in=len(chunks), detail={"failed_check": check}) as s:
        gen = generate_answer(s, llm, task=task, variant="plain",
                              question=f"{question}\n{note(question, prediction.answer, check)}",
                              chunks=chunks, choices=choices, max_tokens=max_tokens)
    kept = not declines(gen.answer) and check_answer(question, gen.answer) is None
    record = {"check": check, "answer": gen.answer, "kept": kept}
    if not kept:  # the first answer stands, with its confidence: the second is never assessed
        return Reread(prediction, [gen.stage], record)
    again = as_prediction(prediction.method, replace(gen, question=question), prediction.chunks_used, [gen.stage],
                          ranking=prediction.ranking)
    return Reread(again, list(again.trace.stages), record)
