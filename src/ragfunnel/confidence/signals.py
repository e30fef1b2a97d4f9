"""Signals of whether an answer is right, each a plain number computed from what a method already has.

Every function here is pure and cheap; the one signal that calls a model (the judge) is read in
:func:`ragfunnel.confidence.assess`. A signal that does not apply to an answer is left out of the
dict, never set to a made-up value; the calibrator treats it as its training mean.

- ``answer_logprob_mean`` / ``answer_logprob_min``: the answering model's log-probability per token of
  its greedy answer (how sure it was while writing it).
- ``support``: the share of the answer's words found in the text the model read; ``support_chunks``:
  log(1 + the number of chunks read that hold the whole answer). An answer the text never says is
  often invented.
- ``answer_rank``: 1 / the rank, in the method's ranking of every chunk, of the best chunk that holds the
  whole answer (0 when none does): an answer from the chunk the ranking put first, or from an also-ran.
- ``draft_agreement``: how far the K drafts' answers agree with each other (mean pairwise token F1);
  ``draft_final_agreement``: with the final answer; ``drafts_answered``: the share that reached "Answer:".
- ``light_agreement``: token F1 between the light and the strong model's answers over the same context.
- ``sample_agreement``: mean token F1 between the answer and a few answers sampled again from the same
  prompt (self-consistency; read in :func:`ragfunnel.confidence.assess`, decoded together from the
  prompt the model already holds).
- ``judge_yes``: the answering model's P("Yes") when asked whether its answer is right.
- ``declined``: 1 when the answer says the text does not hold it; ``answer_words``: log(1 + its words);
  ``type_match``: whether a yes/no, count or date question got that kind of answer; ``echo``: the share
  of the answer's words the question already holds (an unsure model often repeats the question's names).
- ``answer_check``: 1 when the answer passes every check of
  :func:`ragfunnel.confidence.answer_check.check_answer` (its kind fits the question, it is no bare echo, it
  did not stop at an earlier hop of its chain), 0 when one fails; read in :func:`ragfunnel.confidence.assess`,
  which names the failed check in its stage.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from itertools import combinations

from ragfunnel.metrics import normalize_answer, token_f1
from ragfunnel.types import Sample

# Which way each signal should move the chance that an answer is right (+1: higher is likelier right). The
# calibrator keeps a signal only where its fitted weight agrees: on a few dozen rows a signal that points
# the other way is fitting noise.
EXPECTED_DIRECTION = {
    "answer_logprob_mean": 1, "answer_logprob_min": 1, "support": 1, "support_chunks": 1, "support_score": 1,
    "answer_rank": 1, "draft_agreement": 1, "draft_final_agreement": 1, "drafts_answered": 1, "light_agreement": 1,
    "sample_agreement": 1, "judge_yes": 1, "type_match": 1, "declined": -1, "echo": -1, "answer_check": 1,
}

_DECLINED = re.compile(
    r"\b(unanswerable|not (?:mentioned|stated|specified|provided|given|found|available|clear)|no information|"
    r"(?:cannot|can't|can not) be (?:determined|found|answered)|does not (?:say|mention|specify|state)|unknown)\b",
    re.IGNORECASE,
)
_YES_NO_QUESTION = re.compile(r"^\s*(is|are|was|were|do|does|did|can|could|has|have|had|will|would|should)\b",
                              re.IGNORECASE)
_NUMBER_QUESTION = re.compile(r"\b(how (many|much|long|old)|what year|when|what date|which year)\b", re.IGNORECASE)


def logprob_signals(logprobs: Sequence[float]) -> dict[str, float]:
    """Mean and minimum token log-probability of the answer; nothing when the backend gave none."""
    if not logprobs:
        return {}
    return {"answer_logprob_mean": sum(logprobs) / len(logprobs), "answer_logprob_min": min(logprobs)}


def support_signals(answer: str, read: Sequence[str], scores: Sequence[float] | None = None) -> dict[str, float]:
    """How much of ``answer`` the texts the model read contain: the share of its (normalised) words found
    in them, log(1 + how many of them hold the whole answer), and (given the texts' retrieval
    ``scores``) ``support_score``: the best score among those that hold it, over the best score of all
    (0 when none holds it) — an answer from the chunk retrieval trusted most, or from an also-ran."""
    words = normalize_answer(answer).split()
    if not words or not read:
        return {}
    texts = [f" {normalize_answer(t)} " for t in read]
    vocabulary = set().union(*(t.split() for t in texts))
    whole = f" {' '.join(words)} "
    holding = [i for i, t in enumerate(texts) if whole in t]
    out = {"support": sum(w in vocabulary for w in words) / len(words), "support_chunks": math.log1p(len(holding))}
    if scores is not None and len(scores) == len(read) and max(scores) > 0:
        out["support_score"] = max((scores[i] for i in holding), default=0.0) / max(scores)
    return out


def rank_signals(answer: str, ranking: Sequence[str]) -> dict[str, float]:
    """``answer_rank``: 1 / the rank of the first text in ``ranking`` (best first) that holds the whole answer."""
    whole = f" {normalize_answer(answer)} "
    if not whole.strip() or not ranking:
        return {}
    rank = next((r for r, t in enumerate(ranking, start=1) if whole in f" {normalize_answer(t)} "), None)
    return {"answer_rank": 0.0 if rank is None else 1.0 / rank}


def draft_signals(samples: Sequence[Sample], final: str) -> dict[str, float]:
    """Agreement among the drafts' answers and with the final answer (token F1), and the share that
    gave an answer at all. Drafts without an answer do not vote."""
    if not samples:
        return {}
    answers = [s.answer for s in samples if s.answer.strip()]
    out = {"drafts_answered": len(answers) / len(samples)}
    if len(answers) >= 2:
        pairs = list(combinations(answers, 2))
        out["draft_agreement"] = sum(token_f1(a, b) for a, b in pairs) / len(pairs)
    if answers and final.strip():
        out["draft_final_agreement"] = sum(token_f1(a, final) for a in answers) / len(answers)
    return out


def agreement(answer: str, other: str) -> float:
    """Token F1 between two answers to the same question (symmetric)."""
    return token_f1(answer, other)


def form_signals(question: str, answer: str) -> dict[str, float]:
    """What the answer's form says: whether it declines, its length, and whether its kind fits the question."""
    out = {"declined": float(bool(_DECLINED.search(answer))), "answer_words": math.log1p(len(answer.split()))}
    words = normalize_answer(answer).split()
    if words:
        asked = set(normalize_answer(question).split())
        out["echo"] = sum(w in asked for w in words) / len(words)
    first = words[:1]
    if _YES_NO_QUESTION.search(question) and " or " not in question.lower():
        out["type_match"] = float(first in (["yes"], ["no"]))
    elif _NUMBER_QUESTION.search(question):
        out["type_match"] = float(any(ch.isdigit() for ch in answer) or bool(re.search(
            r"\b(one|two|three|four|five|six|seven|eight|nine|ten|hundred|thousand|million|century)\b",
            answer, re.IGNORECASE)))
    return out
