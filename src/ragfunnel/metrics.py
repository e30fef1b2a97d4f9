"""Answer metrics as pure functions, following LongBench / SQuAD conventions."""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache

from ragfunnel.errors import MissingExtra
from ragfunnel.prompts.parsing import option_index, option_letters
from ragfunnel.text.scripts import HAN_CHARACTER, has_han_or_kana

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_HAN = re.compile(f"({HAN_CHARACTER})")
_WIDE_PUNCT = re.compile("[\u3001-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]")


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and the articles a/an/the, squeeze whitespace. Each Chinese or Japanese
    character becomes a word of its own (their words are not spaced), so overlaps count characters."""
    text = text.lower().translate(_PUNCT)
    if has_han_or_kana(text):
        text = _HAN.sub(r" \1 ", _WIDE_PUNCT.sub(" ", text))
    return " ".join(_ARTICLES.sub(" ", text).split())


def overlap_f1(pred: list[str], ref: list[str]) -> float:
    """F1 of the tokens two token lists share, counted with multiplicity."""
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, reference: str) -> float:
    return overlap_f1(normalize_answer(prediction).split(), normalize_answer(reference).split())


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(reference))


def best_over_references(metric, prediction: str, references: list[str]) -> float:
    """The metric against the closest reference (0 when there are none)."""
    return max((metric(prediction, r) for r in references), default=0.0)


def contains_answer(prediction: str, reference: str) -> float:
    """Accuracy as LongBench counts it for open QA: the normalised reference occurs in the prediction."""
    ref = normalize_answer(reference)
    return float(bool(ref) and f" {ref} " in f" {normalize_answer(prediction)} ")


@lru_cache(maxsize=1)
def _rouge_scorer():
    try:
        from rouge_score import rouge_scorer
    except ImportError:
        raise MissingExtra("rouge_score", "eval") from None
    return rouge_scorer.RougeScorer(["rougeL"])


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure (Google's rouge-score, no stemming) for summaries; needs the ``eval`` extra."""
    return _rouge_scorer().score(reference, prediction)["rougeL"].fmeasure


def choice_accuracy(prediction: str, reference: str, choices: list[str]) -> float:
    """Multiple choice: 1 when the prediction picks the correct option, by its text or by its letter.

    ``reference`` is the correct option's text or its letter ("B").
    """
    letters = option_letters(choices)
    wanted = reference.strip()
    correct = letters.index(wanted) if wanted in letters else next(
        (i for i, c in enumerate(choices) if normalize_answer(c) == normalize_answer(wanted)), None)
    picked = option_index(prediction, choices)
    return float(picked is not None and picked == correct)


# Retrieval metrics over a ranked list of units (chunks, passages or titles).


def answer_rank(ranked_texts: list[str], answers: list[str]) -> int | None:
    """1-based rank of the first unit whose text holds an answer string (normalised); None if none does."""
    refs = [f" {r} " for r in map(normalize_answer, answers) if r]
    return next((rank for rank, t in enumerate(ranked_texts, start=1)
                 if any(r in f" {normalize_answer(t)} " for r in refs)), None)


def answer_recall_at_k(ranked_texts: list[str], answers: list[str], k: int) -> float:
    """AR@K: 1 if any answer string (normalised) occurs in any of the top ``k`` units."""
    return float(answer_rank(ranked_texts[:k], answers) is not None)


Span = tuple[int, int]  # [start, end) of a unit, in words from the start of the context


def _overlaps(a: Span, b: Span) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def gold_rank(ranked: list[Span], gold: list[Span]) -> int | None:
    """1-based rank of the first ranked span that overlaps a gold span (a supporting passage); None if none does."""
    return next((rank for rank, span in enumerate(ranked, start=1) if any(_overlaps(span, g) for g in gold)), None)


def gold_recall(used: list[Span], gold: list[Span]) -> float:
    """Share of gold spans that at least one used span overlaps (how much of the evidence reached the LLM)."""
    return sum(1 for g in gold if any(_overlaps(u, g) for u in used)) / len(gold) if gold else 0.0


def evidence_read(read: list[str], document: list[str], answers: list[str],
                  gold_recall: float | None = None) -> bool | None:
    """Whether the text a method read held the evidence for the question.

    True when a unit of ``read`` holds a reference answer (normalised, as :func:`answer_rank` finds it) or,
    where the supporting passages are known (``gold_recall``: the share of them the units read touched),
    when every one was touched. False when neither, yet the evidence was there to read: the supporting
    passages are known, or some unit of ``document`` (every unit the text was cut into) holds an answer.
    None when that cannot be told: no supporting passages known and no unit holds an answer word for word.
    """
    if answer_rank(read, answers) is not None:
        return True
    if gold_recall is not None:
        return gold_recall >= 1.0
    return False if answer_rank(document, answers) is not None else None
