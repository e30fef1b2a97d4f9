"""Citing an answer: for each chunk the answer was read from that states it, its file, page or section, and
the sentence in it that best supports the answer (most words shared with the answer, then with the question).

A chunk is cited only when its best sentence *states* the answer (:func:`states`): it holds the answer's
words (all of an answer of up to three words, three in five of a longer one), or, for a yes/no answer, a third of
the question's words (two at least). A chunk the model read but that says nothing of the answer is not cited;
when no chunk read states it, there are no citations, and :data:`NOT_STATED` says so where citations are shown.
"""

from __future__ import annotations

import math
import re

from ragfunnel.documents.model import LocatedContext
from ragfunnel.text.chunking import word_windows
from ragfunnel.text.scripts import HAN_CHARACTER
from ragfunnel.types import Citation, Prediction

# Sentences end at Western and at full-width (Chinese, Japanese) stops; a point before a digit is a decimal one,
# and one after a lone capital before a capitalised word or another initial an initial ("James K. Polk", "S.M.").
_SENTENCE = re.compile(r"(?:[^.!?。！？\n]|\.(?=\d)|(?<=\b[A-Z])\.(?= [A-Z]|[A-Z]\.))+"
                       r"(?:[.!?。！？]+[\"'”’)\]」』]*|\n|$)")
# A word: one Han character or kana (those scripts leave words unspaced), else a run of other word characters.
_TOKEN = re.compile(rf"{HAN_CHARACTER}|(?:(?!{HAN_CHARACTER})\w)+")
_STOP = frozenset("a an and are as at be by did do does for from had has have he her his how in is it its of on "
                  "or she that the their them they this to was were what when where which who whom whose why "
                  "with would you".split())
LONG_CHUNK_WORDS = 600  # a longer chunk (LC reads the whole text as one) is cited by its best windows
WINDOW_WORDS = 300
WINDOWS_KEPT = 3
QUOTE_CHARS = 400
# A sentence states an answer of up to three words by holding all of them ("Kim Jong-suk" is not stated by
# "Kim Jong-chul"), a longer one by holding this share of them.
WHOLE_ANSWER_WORDS, ANSWER_WORDS_STATED = 3, 0.6
NOT_STATED = "no passage read states this answer"


def cite(prediction: Prediction, context: LocatedContext, question: str) -> list[Citation]:
    """Citations for ``prediction``'s chunks (cut from ``context.text``) that state its answer, best-supporting
    first; none when no chunk read does."""
    answer_words, question_words = _words(prediction.answer), _words(question) - _words(prediction.answer)
    yes_no = prediction.answer.strip().lower().rstrip(".!") in ("yes", "no")
    scored = []
    for spans in _spans(prediction, context):
        found = [best for a, b in spans
                 if (best := _best_sentence(context.text, a, b, answer_words, question_words)) is not None
                 and states(_words(context.text[best[1]:best[2]]), answer_words, question_words, yes_no=yes_no)]
        scored += sorted(found, key=lambda s: (-s[0], s[1]))[:WINDOWS_KEPT] if len(spans) > 1 else found
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [_citation(context, start, end) for _, start, end in scored]


def cited(prediction: Prediction, context: LocatedContext, question: str) -> tuple[list[Citation], str | None]:
    """:func:`cite`'s citations, and :data:`NOT_STATED` when there are none although chunks were read."""
    citations = cite(prediction, context, question)
    return citations, NOT_STATED if not citations and prediction.chunks_used else None


def _spans(prediction: Prediction, context: LocatedContext) -> list[list[tuple[int, int]]]:
    """The character spans to quote from, per chunk used (a long chunk's best windows are found later)."""
    out = []
    for scored in prediction.chunks_used:
        chunk = scored.chunk
        if chunk.start is None or context.text[chunk.start:chunk.start + len(chunk.text)] != chunk.text:
            continue  # cut from some other text (a context truncated to fit the window)
        if chunk.n_words <= LONG_CHUNK_WORDS:
            spans = [(chunk.start, chunk.start + len(chunk.text))]
        else:
            spans = [(chunk.start + a, chunk.start + b) for a, b in word_windows(chunk.text, WINDOW_WORDS)]
        out.append([context.clip(a, b) for a, b in spans])
    return out


def states(sentence: set[str], answer: set[str], question: set[str], *, yes_no: bool = False) -> bool:
    """Whether a sentence (its words) states the answer: all the words of an answer of up to three, or
    :data:`ANSWER_WORDS_STATED` of a longer one's; for a yes/no answer (whose words no text holds), a third of
    the question's words, two at least (a two-part question is seldom stated in one sentence)."""
    if yes_no or not answer:
        return bool(question) and len(sentence & question) >= min(len(question), max(2, math.ceil(len(question) / 3)))
    need = len(answer) if len(answer) <= WHOLE_ANSWER_WORDS else math.ceil(ANSWER_WORDS_STATED * len(answer))
    return len(sentence & answer) >= need


def _best_sentence(text: str, start: int, end: int, answer: set[str],
                   question: set[str]) -> tuple[float, int, int] | None:
    best = None
    for match in _SENTENCE.finditer(text, start, end):
        a, b = match.span()
        piece = text[a:b]
        stripped = piece.strip()
        if not _TOKEN.search(stripped):
            continue
        a += len(piece) - len(piece.lstrip())
        b = a + len(stripped)
        words = _words(stripped)
        score = 2.0 * len(words & answer) + len(words & question)
        if best is None or score > best[0]:
            best = (score, *_focus(text, a, b, answer or question))
    return best


def _focus(text: str, start: int, end: int, words: set[str]) -> tuple[int, int]:
    """``start``..``end``, or for a sentence longer than a quote, the quote-sized stretch of it (whole words)
    that begins a little before its first word from ``words``."""
    if end - start <= QUOTE_CHARS:
        return start, end
    hit = next((m.start() for m in _TOKEN.finditer(text, start, end) if m.group().lower() in words), start)
    a = max(start, hit - QUOTE_CHARS // 3)
    if a > start:
        a = text.find(" ", a, hit) + 1 or a
    b = min(end, a + QUOTE_CHARS)
    if b < end:
        b = text.rfind(" ", a, b) if text.rfind(" ", a, b) > hit else b
    return a, b


def _citation(context: LocatedContext, start: int, end: int) -> Citation:
    where = context.locate(start)
    doc, local = where.document, where.offset
    local_end = local + (end - start)
    section = where.section
    lines = (doc.line_at(local), doc.line_at(local_end)) if doc.format in ("text", "markdown") else None
    return Citation(file=doc.name, start=local, end=local_end, quote=doc.text[local:local_end],
                    page=section.page if section else None, page_label=section.page_label if section else None,
                    section=section.heading[-1] if section and section.heading else None, lines=lines)


def _words(text: str) -> set[str]:
    return {w for w in _TOKEN.findall(text.lower()) if w not in _STOP}
