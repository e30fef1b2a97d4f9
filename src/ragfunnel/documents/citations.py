"""Citing an answer: for each chunk the answer was read from that states it, its file, page or section, and the
sentence in it that best supports the answer (most words shared with the answer, then with the question) among those
that state it.

A sentence *states* the answer (:func:`states`) when it holds the answer's words (all of an answer of up to three
words, three in five of a longer one, one at least of those the answer adds to the question) and one of the
question's words beyond the answer's own (or a form of one), so that it speaks of what was asked; for a yes/no
answer, a third of the question's words (two at least). An answer that only repeats a phrase of the question
(:func:`echoes`: "The Pequod" for "Which ship picked up Ishmael after the Pequod sank?") is stated by every passage
naming what the question names, so it is cited by none; when the question offers options ("X or Y?"), repeating one
is an answer, stated by a sentence holding it alone. A chunk the model read but that says nothing of the answer is
not cited; when no chunk read states it, there are no citations, and :data:`NOT_STATED` says so where citations are
shown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

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
# A question that offers options ("X or Y?", "A还是B？", "A和B谁…？") is answered by repeating one of them. Read
# broadly: a question wrongly taken for a choice leaves an echo cited, a choice taken for an echo a right answer not.
_CHOICE = re.compile(r"\b(?:or|whether|between)\b|还是|或|和|与", re.IGNORECASE)
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
    first; none when no chunk read does, or when the answer only repeats the question (:func:`echoes`)."""
    answer_words, asked_words = _words(prediction.answer), _words(question)
    # an answer in a sentence ("The ferry leaves at nine.") holds the question's words in other forms
    question_words = {w for w in asked_words if not _shares({w}, answer_words)}
    yes_no = prediction.answer.strip().lower().rstrip(".!") in ("yes", "no")
    if not yes_no and echoes(prediction.answer, question):
        return []
    # The option a choice question's answer repeats is stated without the question's other words: what makes
    # it the right one (a birth date, a size) is seldom worded as the question words it ("oldest", "larger").
    option = not yes_no and bool(answer_words) and _is_phrase_of(prediction.answer, question)
    stated_by = set() if option else question_words
    repeated = answer_words & asked_words

    def stating(sentence: set[str], before: set[str]) -> bool:
        return states(sentence, answer_words, stated_by, yes_no=yes_no, repeated=repeated, before=before)

    scored = []
    for spans in _spans(prediction, context):
        found = [best for a, b in spans
                 if (best := _best_sentence(context.text, a, b, answer_words, question_words, stating)) is not None]
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


def states(sentence: set[str], answer: set[str], question: set[str], *, yes_no: bool = False,
           repeated: set[str] | frozenset[str] = frozenset(), before: set[str] | frozenset[str] = frozenset()) -> bool:
    """Whether a sentence (its words) states the answer to the question (its words beyond the answer's): all
    the words of an answer of up to three, or :data:`ANSWER_WORDS_STATED` of a longer one's, one at least not
    among the words it ``repeated`` from the question (an answer half made of the question is stated by what it
    adds, not by the question's words), and a word of the question, or a form of one, when it has one (a
    sentence naming the answer but nothing asked about is no evidence for it), there or in the sentence ``before``
    it in the same passage ("Gull Rock Light stands off Tarrow Point. Its last keeper, Ada Penhallow, ...": "its"
    is the light); for a yes/no answer (whose words no text holds), a third of the question's words, two at
    least (a two-part question is seldom stated in one sentence)."""
    if yes_no or not answer:
        return bool(question) and len(sentence & question) >= min(len(question), max(2, math.ceil(len(question) / 3)))
    need = len(answer) if len(answer) <= WHOLE_ANSWER_WORDS else math.ceil(ANSWER_WORDS_STATED * len(answer))
    held = sentence & answer
    return (len(held) >= need and bool(held - repeated or not answer - repeated)
            and (not question or _shares(sentence | before, question)))


def echoes(answer: str, question: str) -> bool:
    """Whether the answer only repeats the question: its words, stopwords aside, are a phrase of the question's
    (the same words, in order, side by side; a Chinese answer's characters likewise), and the question offers no
    choice between options, one of which a right answer repeats ("Which is older, the Pequod or the Rachel?").
    An answer recombining the question's words ("Treaty on European Union" for "... the European Trade Union
    Confederation's jurisdiction began with the signing of what treaty?") says something the question did not."""
    return _is_phrase_of(answer, question) and not _CHOICE.search(question)


def _is_phrase_of(answer: str, question: str) -> bool:
    said, asked = _sequence(answer), _sequence(question)
    return bool(said) and any(asked[i:i + len(said)] == said for i in range(len(asked) - len(said) + 1))


def _best_sentence(text: str, start: int, end: int, answer: set[str], question: set[str],
                   stating: Callable[[set[str], set[str]], bool]) -> tuple[float, int, int] | None:
    """The best-supporting sentence of ``start``..``end`` among those that state the answer (its quote's words
    judged by ``stating``): a chunk states the answer when any of its sentences does, whichever shares most."""
    best, before = None, set()
    for match in _SENTENCE.finditer(text, start, end):
        a, b = match.span()
        piece = text[a:b]
        stripped = piece.strip()
        if not _TOKEN.search(stripped):
            continue
        a += len(piece) - len(piece.lstrip())
        b = a + len(stripped)
        words = _words(stripped)
        previous, before = before, words
        score = 2.0 * len(words & answer) + len(words & question)
        if best is not None and score <= best[0]:
            continue
        quote = _focus(text, a, b, answer or question)
        if stating(_words(text[quote[0]:quote[1]]), previous):
            best = (score, *quote)
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
    return set(_sequence(text))


def _shares(words: set[str], others: set[str]) -> bool:
    """Whether ``words`` hold a word of ``others`` or a form of one: one beginning the other, both of four
    characters at least ("leave", "leaves"; "pick", "picked"), enough to tell what a sentence speaks of."""
    return bool(words & others) or any(
        min(len(a), len(b)) >= 4 and (a.startswith(b) or b.startswith(a)) for a in words for b in others)


def _sequence(text: str) -> list[str]:
    return [w for w in _TOKEN.findall(text.lower()) if w not in _STOP]
