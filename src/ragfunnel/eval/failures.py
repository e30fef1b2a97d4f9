"""What went wrong with a wrong answer: one failure kind per wrong eval row.

A kind is told from the question, the answer, the reference answers and the question's intermediate answers
alone (no model), so any run, old rows included, can be judged the same way. The kinds, checked in this order
(the first that fits wins):

``earlier_hop``   the answer matches an intermediate answer of the question's decomposition (MuSiQue's
                  sub-answers but the last; HotpotQA's supporting titles): the model stopped a hop short
``wrong_option``  a comparison question ("Who was born first, A or B?") answered with the option that is
                  not the reference
``wrong_yes_no``  a yes/no answer the opposite of the reference
``echo``          every content word of the answer is in the question
``wrong_type``    the answer cannot be of the kind asked for: "when" without a date, "how many" without a
                  number, a yes/no question answered otherwise, "who"/"where" answered with a date or number
``other``         none of these; an empty answer and one that declines ("unanswerable") are here, since
                  they state nothing whose kind could be told

"Matches" is one test throughout (:func:`matches`): equal once normalised, or token F1 at least
:data:`MATCH_AT`. The question kinds are read from the question's words only and kept conservative: a
Chinese question, or one with no question word (a wh-word, or an auxiliary verb opening it), never gets
``wrong_type``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal, get_args

# The question and answer readings live below eval/ because the answering path checks answers with them too
# (ragfunnel.confidence.answer_check); they are named here as well, where the failure kinds are told by them.
from ragfunnel.confidence.answer_check import (
    MATCH_AT,
    QuestionKind,
    comparison_options,
    declines,
    echoes,
    matches,
    misfits_kind,
    polarity,
    question_kind,
)
from ragfunnel.confidence.measures import RIGHT_AT, is_right
from ragfunnel.metrics import best_over_references, normalize_answer, token_f1
from ragfunnel.types import Example

__all__ = ["FAILURE_DEFINITIONS", "FAILURE_KINDS", "MATCH_AT", "FailureKind", "QuestionKind", "comparison_options",
           "declines", "echoes", "failure_kind", "failure_of", "hop_answers", "matches", "picked_other_option",
           "polarity", "question_kind", "wrong_type"]

FailureKind = Literal["earlier_hop", "wrong_option", "wrong_yes_no", "echo", "wrong_type", "other"]
FAILURE_KINDS: tuple[FailureKind, ...] = get_args(FailureKind)
# One line each, for the report's note and the benchmark's output.
FAILURE_DEFINITIONS: dict[FailureKind, str] = {
    "earlier_hop": ("matches an intermediate answer of the question (a MuSiQue sub-answer, a HotpotQA bridge "
                    "passage's title): it stopped a hop short"),
    "wrong_option": "matches the option of a comparison question (\"A or B?\") that is not the reference",
    "wrong_yes_no": "yes where the reference says no, or no where it says yes",
    "echo": "every content word of the answer is in the question",
    "wrong_type": ("cannot be of the kind asked for: a when-question without a date, how-many without a number, a "
                   "yes/no question answered otherwise, who/where with only a date or number"),
    "other": "none of these, empty answers and declines included",
}

_DISAMBIGUATION = re.compile(r"\s*\([^)]*\)\s*$")


def wrong_type(question: str, answer: str, references: Sequence[str]) -> bool:
    """Whether the answer cannot be of the kind the question asks for (see :func:`question_kind`).

    A yes/no question counts only when its references are yes or no too: an auxiliary-led question whose
    reference is a name was not asking for yes or no.
    """
    kind = question_kind(question)
    if kind == "yes_no":
        return polarity(answer) is None and bool(references) and all(polarity(r) for r in references)
    return misfits_kind(kind, answer)


def picked_other_option(question: str, answer: str, references: Sequence[str]) -> bool:
    """Whether the answer is the option of a comparison question that the references are not.

    The answer's option is the one it matches best (two options may share a word: "Richard Wright or Richard
    Bach"), and the references' option the one they match best; a tie on either side says nothing.
    """
    options = comparison_options(question)
    if options is None:
        return False
    said = [token_f1(answer, o) for o in options]
    meant = [best_over_references(token_f1, o, list(references)) for o in options]
    if said[0] == said[1] or meant[0] == meant[1]:
        return False
    picked = said.index(max(said))
    return matches(answer, options[picked]) and picked != meant.index(max(meant))


def failure_kind(question: str, answer: str, references: Sequence[str], hop_answers: Sequence[str], *,
                 right: bool | None = None) -> FailureKind | None:
    """The kind of failure of a wrong answer (see the module docstring for each kind); None for a right one.

    ``right`` is the run's own verdict (:func:`~ragfunnel.confidence.measures.is_right` of the row's metrics);
    without it, an answer is right when its best token F1 over the references reaches ``RIGHT_AT``, as the
    default metrics would judge it. ``hop_answers`` are the question's intermediate answers; one equal to a
    reference (normalised) is the answer itself, not an earlier hop.
    """
    if right is None:
        right = best_over_references(token_f1, answer, list(references)) >= RIGHT_AT
    if right:
        return None
    if declines(answer):
        return "other"
    answers = {normalize_answer(r) for r in references}
    if any(matches(answer, h) for h in hop_answers if normalize_answer(h) not in answers):
        return "earlier_hop"
    if picked_other_option(question, answer, references):
        return "wrong_option"
    said = polarity(answer)
    if said is not None and references and all(polarity(r) not in (None, said) for r in references):
        return "wrong_yes_no"
    if echoes(question, answer):
        return "echo"
    if wrong_type(question, answer, references):
        return "wrong_type"
    return "other"


def hop_answers(example: Example) -> list[str]:
    """The intermediate answers of an example's question: ``meta["hop_answers"]`` when the dataset gives them
    (MuSiQue's decomposition, a user's JSONL), else the titles of its supporting passages (HotpotQA: a bridge
    question's first hop is the entity a supporting passage is about).

    A title loses its disambiguation ("Michael Jackson (writer)" is Michael Jackson), and a title the question
    names itself is where the question starts, not a hop, so it is left out. A comparison question's supporting
    titles are its two options, not hops, so it has none: a wrong pick between them is ``wrong_option``.
    """
    meta = example.meta
    if "hop_answers" in meta:
        return [str(a) for a in meta["hop_answers"] or ()]
    if meta.get("type") == "comparison" or comparison_options(example.question) is not None:
        return []
    titles = (_DISAMBIGUATION.sub("", str(t)).strip() for t in meta.get("supporting_titles") or ())
    return [t for t in titles if t and not echoes(example.question, t)]


def failure_of(example: Example, answer: str, metrics: Mapping[str, float]) -> FailureKind | None:
    """An eval row's failure kind: None unless the row's own verdict (``is_right`` of its metrics) is wrong;
    a summary, which is neither right nor wrong, has none."""
    if is_right(metrics) is not False:
        return None
    return failure_kind(example.question, answer, example.answers, hop_answers(example), right=False)
