"""Citing an answer: for each chunk the answer was read from that states it, its file, page or section, and the
sentence in it that best supports the answer (most words shared with the answer, then with the question) among those
that state it.

A sentence *states* the answer (:class:`Asked`, :func:`states`) when

- it holds the answer: an answer of up to three words as a phrase (its words in order, side by side, stopwords
  aside; "Barnaby Thomas Gerard Joyce" does not state "Barnaby Joyce", nor "Brad Pitt and Angelina Jolie"
  "Angelina Jolie Pitt"; the words of an answer holding a number in either order, as dates are written), a longer
  one by three in five of its words, one at least of those it adds to the question;
- and it speaks of what was asked: it holds a word of the question beyond the answer's own, or a form of one
  ("leaves" for "leave"), there or in the two sentences before it in the same passage ("Gull Rock Light stands
  off Tarrow Point. Its last keeper, Ada Penhallow, ..."), reading across the chunk's edges ("The lighthouse
  keeper is called | Ada Brun.").

A yes/no answer is stated by a third of the question's words (two at least). An answer that only repeats the
question (:meth:`Asked.echo`: "The Pequod" for "Which ship picked up Ishmael after the Pequod sank?") is stated by
every passage naming what the question names, so it is cited by none; when the question offers options ("X or
Y?"), repeating one is an answer, stated by a sentence holding it. A chunk the model read but that says nothing of
the answer is not cited; when no chunk read states it, there are no citations, and :data:`NOT_STATED` says so
where citations are shown.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ragfunnel.documents.model import LocatedContext
from ragfunnel.text.chunking import word_windows
from ragfunnel.text.scripts import CHINESE_STOPWORDS, HAN_CHARACTER
from ragfunnel.types import Citation, Prediction

# Sentences end at Western and at full-width (Chinese, Japanese) stops; a point before a digit is a decimal one,
# and one after a lone capital before a capitalised word or another initial an initial ("James K. Polk", "S.M.").
_SENTENCE = re.compile(r"(?:[^.!?。！？\n]|\.(?=\d)|(?<=\b[A-Z])\.(?= [A-Z]|[A-Z]\.))+"
                       r"(?:[.!?。！？]+[\"'”’)\]」』]*|\n|$)")
# A word: one Han character or kana (those scripts leave words unspaced), else a run of other word characters.
_TOKEN = re.compile(rf"{HAN_CHARACTER}|(?:(?!{HAN_CHARACTER})\w)+")
# English stopwords, and the Chinese function words of one character (a Chinese word here is one character).
_STOP = frozenset("a an and are as at be by did do does for from had has have he her his how in is it its of on "
                  "or she that the their them they this to was were what when where which who whom whose why "
                  "with would you".split()) | {w for w in CHINESE_STOPWORDS if len(w) == 1}
# What a Chinese question asks with ("多少", "哪一年", "谁"): no passage holds it, so it is no word of the question.
_CHINESE_ASKING = re.compile("|".join(sorted({*(w for w in CHINESE_STOPWORDS if len(w) > 1), "哪", "谁", "几"},
                                             key=len, reverse=True)))
# A question offering options ("X or Y?", "whether", "between", "A还是B？", "A和B哪个…？") is answered by repeating
# one. Read broadly: a question wrongly taken for a choice leaves an echo cited, a choice taken for an echo a right
# answer not.
_CHOICE = re.compile(r"\b(?:or|whether|between|versus|vs)\b|还是|或|[和与跟].*[哪谁]|[哪谁].*[和与跟]", re.IGNORECASE)
_ENDINGS = ("ings", "ing", "ers", "er", "ed", "es", "s")  # taken off a word to find its other forms
_PASSAGE_BREAK = re.compile(r"\n\s*\n")
LONG_CHUNK_WORDS = 600  # a longer chunk (LC reads the whole text as one) is cited by its best windows
WINDOW_WORDS = 300
WINDOWS_KEPT = 3
QUOTE_CHARS = 400
# A sentence states an answer of up to three words as a phrase ("Kim Jong-suk" is not stated by "Kim Jong-chul"),
# a longer one by holding this share of its words.
WHOLE_ANSWER_WORDS, ANSWER_WORDS_STATED = 3, 0.6
RESTATED_WORDS = 2  # an answer holding this many of the question's words restates it
# The sentences before a quote, in its passage, that may hold the question's word: "it", "she", "the light" in
# the quote name what they name ("Its last keeper, Ada Penhallow").
SENTENCES_BEFORE = 2
LOOK_AROUND_CHARS = 1500  # how far past a chunk's edges to read its cut sentences and the sentences before
NOT_STATED = "no passage read states this answer"


@dataclass(frozen=True)
class Asked:
    """An answer and its question, read once: what a sentence must hold to state the answer."""

    answer: tuple[str, ...]  # the answer's words in order, stopwords aside
    core: tuple[str, ...]  # those it adds to the question if it restates the question, else all of them
    question: frozenset[str]  # the question's words beyond the answer's (none of them a form of an answer word)
    yes_no: bool
    option: bool  # the answer repeats a phrase of a question that offers options ("X or Y?")
    echo: bool  # the answer only repeats the question

    @classmethod
    def of(cls, answer: str, question: str) -> Asked:
        said, asked = (_sequence(_CHINESE_ASKING.sub(" ", text)) for text in (answer, question))
        yes_no = answer.strip().lower().rstrip(".!") in ("yes", "no")
        repeats = not yes_no and _is_phrase(said, asked)
        choice = bool(_CHOICE.search(question))
        # an answer restating the question ("The ferry leaves at nine.") is held by what it adds to it
        stems = {_stem(w) for w in asked}
        adds = tuple(w for w in said if _stem(w) not in stems)
        core = adds if adds and len(said) - len(adds) >= RESTATED_WORDS else tuple(said)
        return cls(answer=tuple(said), core=core, question=frozenset(w for w in asked if not _shares({w}, set(said))),
                   yes_no=yes_no, option=repeats and choice, echo=repeats and not choice)

    def stated_by(self, quote: Sequence[str], *, cut: tuple[Sequence[str], Sequence[str]] = ((), ()),
                  before: set[str] | frozenset[str] = frozenset()) -> bool:
        """Whether a quote (its words, in order) states the answer. ``cut`` holds the words of its sentence that
        the chunk's edges cut off before and after it (the answer may run over an edge, but must stand in the
        quote in part); ``before``, those of the sentences before it in its passage."""
        if self.echo:
            return False
        if self.yes_no or not self.answer:
            words, question = set(quote), self.question
            return bool(question) and len(words & question) >= min(len(question), max(2, math.ceil(len(question) / 3)))
        head, tail = cut
        whole = [*head, *quote, *tail]
        words = set(whole)
        if len(self.core) <= WHOLE_ANSWER_WORDS:
            held = _holds_phrase(whole, self.core, within=(len(head), len(head) + len(quote)))
        else:
            held = (len(words & set(self.core)) >= math.ceil(ANSWER_WORDS_STATED * len(set(self.core)))
                    and bool(set(quote) & set(self.core)))
        # what makes an option the right one (a birth date, a size) is seldom worded as the question words it
        # ("oldest", "larger")
        return held and (self.option or not self.question or _shares(words | before, self.question))


def states(sentence: str, answer: str, question: str, *, before: str = "") -> bool:
    """Whether ``sentence`` states ``answer`` to ``question``, ``before`` being the sentences before it in its
    passage (see the module's docstring)."""
    return Asked.of(answer, question).stated_by(_sequence(sentence), before=set(_sequence(before)))


def cite(prediction: Prediction, context: LocatedContext, question: str) -> list[Citation]:
    """Citations for ``prediction``'s chunks (cut from ``context.text``) that state its answer, best-supporting
    first; none when no chunk read does, or when the answer only repeats the question."""
    asked = Asked.of(prediction.answer, question)  # an echo is stated by no sentence
    scored = []
    for spans in _spans(prediction, context):
        found = [best for a, b in spans if (best := _best_sentence(context, a, b, asked)) is not None]
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


def _best_sentence(context: LocatedContext, start: int, end: int, asked: Asked) -> tuple[float, int, int] | None:
    """The best-supporting quote of ``start``..``end`` among those that state the answer: a chunk states it when
    any of its sentences does, whichever shares most with the answer, then the question. Each sentence is read
    whole, past the chunk's edges, with the sentences before it in its passage."""
    text = context.text
    floor = context.starts[max(bisect.bisect_right(context.starts, start) - 1, 0)]  # its document's beginning
    # the last sentence, read to its end past the chunk's (a text without stops, only so far)
    ending = _SENTENCE.match(text, max(start, end - 1), min(len(text), end + LOOK_AROUND_CHARS))
    stop = max(end, ending.end() if ending else end)
    best, before, last = None, [], max(floor, start - LOOK_AROUND_CHARS)
    for match in _SENTENCE.finditer(text, last, stop):
        a, b = match.span()
        piece = text[a:b]
        stripped = piece.strip()
        if not _TOKEN.search(stripped):
            continue
        a += len(piece) - len(piece.lstrip())
        b = a + len(stripped)
        if _PASSAGE_BREAK.search(text, last, a):
            before = []
        last = b
        words = _sequence(stripped)
        earlier = set().union(*before)
        before = [*before, set(words)][-SENTENCES_BEFORE:]
        if b <= start or a >= end:
            continue  # read for what comes after it, not quoted: it is not in the chunk
        quote = _focus(text, max(a, start), min(b, end), set(asked.answer) or asked.question)
        said = _sequence(text[quote[0]:quote[1]])
        # where the chunk's edge cuts the sentence, the rest of it is read too
        cut = (_sequence(text[a:quote[0]]) if quote[0] == start else [],
               _sequence(text[quote[1]:b]) if quote[1] == end else [])
        score = 2.0 * len(set(said) & set(asked.answer)) + len(set(said) & asked.question)
        if (best is None or score > best[0]) and asked.stated_by(said, cut=cut, before=earlier):
            best = (score, *quote)
    return best


def _focus(text: str, start: int, end: int, words: set[str] | frozenset[str]) -> tuple[int, int]:
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
                    section=section.heading[-1] if section and section.heading else None, lines=lines,
                    sheet=section.sheet if section else None, row=section.row if section else None,
                    slide=section.slide if section else None)


def _sequence(text: str) -> list[str]:
    return [w for w in _TOKEN.findall(text.lower()) if w not in _STOP]


def _is_phrase(said: Sequence[str], asked: Sequence[str]) -> bool:
    """Whether ``said`` is a phrase of ``asked``: its words, in order, side by side."""
    n = len(said)
    return n > 0 and any(tuple(asked[i:i + n]) == tuple(said) for i in range(len(asked) - n + 1))


def _holds_phrase(sentence: Sequence[str], answer: Sequence[str], *, within: tuple[int, int] | None = None) -> bool:
    """Whether ``sentence`` holds ``answer`` as a phrase (an answer holding a number in any order: "1 August
    2019", "August 1, 2019"), reaching into its words ``within`` (a start and an end) when given."""
    n, wanted = len(answer), sorted(answer)
    numbered = any(w.isdigit() for w in answer)
    low, high = within or (0, len(sentence))
    return any((tuple(sentence[i:i + n]) == tuple(answer) or numbered and sorted(sentence[i:i + n]) == wanted)
               and i < high and i + n > low for i in range(len(sentence) - n + 1))


def _shares(words: set[str] | frozenset[str], others: set[str] | frozenset[str]) -> bool:
    """Whether ``words`` hold a word of ``others`` or a form of one: the two the same once an English ending is
    taken off, or one beginning the other, both of four characters at least ("leave", "leaves"; "keeps",
    "keeper"), enough to tell what a sentence speaks of."""
    if words & others:
        return True
    stems, other_stems = {_stem(w) for w in words}, {_stem(w) for w in others}
    return bool(stems & other_stems) or any(
        min(len(a), len(b)) >= 4 and (a.startswith(b) or b.startswith(a)) for a in stems for b in other_stems)


def _stem(word: str) -> str:
    """``word`` without an English ending (and a final "e": "leave", "leaves" -> "leav")."""
    for ending in _ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            word = word[:-len(ending)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word
