"""Whether an answer fits its question, read from the two texts alone: no model, no reference answer.

The question is read for the kind of answer it asks for (:func:`question_kind`), and the options a comparison
names (:func:`comparison_options`); the answer for its polarity, a decline, numbers and dates. These readings
serve two callers: :func:`check_answer`, which checks an answer as it is given (the ``answer_check`` signal),
and :mod:`ragfunnel.eval.failures`, which names what went wrong with a wrong eval row.

The readings are kept conservative: a Chinese question, or one with no question word (a wh-word, or an
auxiliary verb opening it), has no kind, so its answer's type is never checked. "Matches" is one test
throughout (:func:`matches`): equal once normalised, or token F1 at least :data:`MATCH_AT`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, get_args

from ragfunnel.confidence.measures import RIGHT_AT
from ragfunnel.metrics import normalize_answer, token_f1
from ragfunnel.text.scripts import CHINESE_STOPWORDS, has_han_or_kana

QuestionKind = Literal["yes_no", "choice", "when", "how_many", "who", "where", "open"]
AnswerCheck = Literal["type", "echo", "earlier_hop"]
ANSWER_CHECKS: tuple[AnswerCheck, ...] = get_args(AnswerCheck)  # in the order :func:`check_answer` runs them

# The same bar as a right answer's F1: an answer "matches" an intermediate answer or an option exactly as
# it would have matched a reference.
MATCH_AT = RIGHT_AT
# A yes/no question answered without yes or no fails the type check only when the answer is a statement of at
# least this many words (it holds an auxiliary verb: "Nolan is a director and Kalathil is one too"). A short
# answer to an auxiliary-led question is often the thing asked about, which a reference may count right
# ("Do Lafzon Ki Kahani ..., released in which year?" "2011"), and so is a list of names ("Were other
# baselines tested?" "SVM, Word Count Baseline, Human Performance").
YES_NO_STATEMENT_WORDS = 5

_WORD = re.compile(r"[a-z0-9']+")
_AUXILIARIES = frozenset("is are was were am do does did can could has have had will would should shall may "
                         "might must".split())
_WH_WORDS = frozenset("who whom whose what which when where why how".split())
# Words a question may open with before its wh-word: "In which year ...", "For whom ...".
_PREPOSITIONS = frozenset("in on at for from by of to during since with after before until into under within "
                          "about".split())
_YEAR_PHRASE = re.compile(r"\b(?:what|which) (?:year|date|decade|century|month|day)\b")
_HOW_MANY = re.compile(r"\bhow many\b")
# Lower-case words inside a name: "The Lord of the Rings", "First for Women", "Arthur's Magazine".
_JOINING = frozenset("of the for and de la le du von van da di del a an in on at to".split())
_OR = re.compile(r"\s+or\s+", re.IGNORECASE)
_SEPARATOR = re.compile(r"[,;:]|\s[-\u2013\u2014]\s")
_POSSESSIVE = re.compile(r"['\u2019]s\b")
_BETWEEN = re.compile(r"\s*between\s+(?P<a>[^,]+?)\s+and\s+(?P<b>[^,]+?)\s*,", re.IGNORECASE)
_DECLINE = re.compile(r"\b(?:unanswerable|not (?:mentioned|stated|specified|provided|given|found|known)|"
                      r"no (?:information|answer)|(?:cannot|can't|can not) be (?:determined|found|answered)|"
                      r"(?:does|do|did) not (?:say|mention|specify|state)|(?:doesn't|don't|didn't) "
                      r"(?:say|mention|specify|state)|(?:i )?(?:do not|don't) know)\b", re.IGNORECASE)
# Declines only as the whole answer: "Unknown Pleasures" is an album.
_DECLINE_WHOLE = frozenset({"unknown", "na"})  # "N/A" normalised

# Function words of English answers and questions: an answer is an echo when all its other words are asked.
_STOP_WORDS = frozenset(
    "a an the and or but of in on at to for from by with as into onto over under about after before during since "
    "until than then that this these those it its it's he she they them his her their him we us our you your i me "
    "my is are was were be been being am do does did has have had will would can could should shall may might must "
    "not no yes so if also both either neither which who whom whose what when where why how there here one's "
    "s".split()) | frozenset(CHINESE_STOPWORDS)

_NUMBER_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred hundreds thousand "
    "thousands million millions billion billions trillion dozen dozens none once twice thrice single couple "
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth sixteenth seventeenth eighteenth nineteenth twentieth twentyfirst".split())
_MONTHS = frozenset(
    "january february march april may june july august september october november december jan feb mar apr jun "
    "jul aug sep sept oct nov dec".split())
# Words that place an answer in time without a number: "the Bronze Age", "after the war", "in the spring".
_TIME_WORDS = frozenset(
    "century centuries decade decades year years ago bc bce ad ce era age ages period dynasty reign spring summer "
    "autumn fall winter morning evening night noon midnight today yesterday tomorrow during after before since "
    "until early late mid now never always".split())
_NUMERAL = re.compile(r"\d+(?:st|nd|rd|th|s|am|pm)?")
_PIECE = re.compile(r"[a-z]+|\d+[a-z]*")


def matches(answer: str, target: str) -> bool:
    """Whether ``answer`` says ``target``: equal once normalised, or token F1 at least :data:`MATCH_AT`."""
    a, t = normalize_answer(answer), normalize_answer(target)
    return bool(a) and bool(t) and (a == t or token_f1(answer, target) >= MATCH_AT)


def _opening(question: str) -> tuple[list[str], int]:
    """The lower-cased words of the sentence that asks (the last one opening with a question word: "X has an
    OBE. Does Y have one?" asks in its second) and the index of its first word after opening prepositions."""
    sentences = [_WORD.findall(s.lower()) for s in re.split(r"(?<=[.!?])\s+", question)]
    for words in reversed(sentences):
        i = _first_after_prepositions(words)
        if words and (words[i] in _WH_WORDS or words[i] in _AUXILIARIES):
            return words, i
    words = _WORD.findall(question.lower())
    return words, _first_after_prepositions(words)


def _first_after_prepositions(words: list[str]) -> int:
    i = 0
    while i < len(words) - 1 and words[i] in _PREPOSITIONS:
        i += 1
    return i


def _name_run(words: list[str], *, from_end: bool) -> list[str]:
    """The run of words naming something at one end of ``words``: capitalised words or numbers, with the
    lower-case words that join them ("The Lord of the Rings"), never ending on a joining word."""
    ordered = list(reversed(words)) if from_end else list(words)
    run: list[str] = []
    for word in ordered:
        bare = word.strip("\"'()")
        if bare[:1].isupper() or bare[:1].isdigit() or (run and bare.lower() in _JOINING):
            run.append(word)
        else:
            break
    if from_end:
        run.reverse()
    while run and run[0].strip("\"'()").lower() in _JOINING | _WH_WORDS | _AUXILIARIES:
        run.pop(0)
    while run and run[-1].strip("\"'()").lower() in _JOINING:
        run.pop()
    return run


def comparison_options(question: str) -> tuple[str, str] | None:
    """The two options a comparison question names around its " or " ("Who was born first, A or B?" gives
    (A, B)); None when it names none.

    The right option must run to the question's end ("Is A or B older?" gives B by its capitalised words). The
    left one starts after the last comma (or colon, or dash) before " or ", else it is the name just before
    " or " ("Which magazine came first Arthur's Magazine or First for Women?", when the question ends in a
    name too), else, in a question opening with an auxiliary, what follows the opening words ("Are cats or dogs
    ..."): an "or" inside a longer statement ("Who ruled where Ann or Bob lived?") is no choice offered.
    """
    if has_han_or_kana(question):
        return None
    if between := _BETWEEN.match(question):  # "Between A and B, which writer ...?"
        return between["a"].strip(), between["b"].strip()
    words, i = _opening(question)
    if not words or (words[i] not in _WH_WORDS and words[i] not in _AUXILIARIES):
        return None
    found = _OR.search(question)
    if found is None:
        return None
    # A comma just before " or " ("Who won, Angelina Jolie Pitt, or Genndy Tartakovsky?") ends the left
    # option, it does not start an empty one.
    before = question[:found.start()].rstrip().rstrip(",;").rstrip()
    after = question[found.end():].strip().rstrip("?").strip()
    if re.search(r"[,;:?]", after):
        return None
    head = _name_run(after.split(), from_end=False)
    right = " ".join(head) or after
    pieces = _SEPARATOR.split(before)
    if len(pieces) > 1:
        left = pieces[-1].strip()
    elif (run := _name_run(before.split(), from_end=True)) and (words[i] in _AUXILIARIES
                                                               or _name_run(after.split(), from_end=True)):
        left = " ".join(run)
    elif words[i] in _AUXILIARIES:
        opening = before.split()
        while opening and opening[0].strip("\"'()").lower() in _AUXILIARIES | _PREPOSITIONS:
            opening.pop(0)
        left = " ".join(opening)
    else:
        return None
    return (left, right) if normalize_answer(left) and normalize_answer(right) else None


def question_kind(question: str) -> QuestionKind | None:
    """What kind of answer the question asks for; None when that cannot be told.

    Read from the asking sentence's opening words: ``choice`` for an auxiliary-led question naming two options,
    ``yes_no`` for one naming none, ``who``, ``where``, ``when``, else ``open`` for a wh-question. Phrases
    that say it wherever they stand count too: "how many", "what year", and a question ending in its
    wh-word ("... founded by who?"). A Chinese question, or one with no question word, is None: its kind is not
    guessed.
    """
    if has_han_or_kana(question):
        return None
    words, i = _opening(question)
    if not words:
        return None
    text, first, last = " ".join(_WORD.findall(question.lower())), words[i], words[-1]
    if first in _AUXILIARIES:
        return "choice" if comparison_options(question) else "yes_no"
    if _HOW_MANY.search(text):
        return "how_many"
    # "When did ...", not "When considering A and B, which ...": an opening when/where asks only before a verb.
    asks = len(words) > i + 1 and words[i + 1] in _AUXILIARIES
    if (first == "when" and asks) or last == "when" or _YEAR_PHRASE.search(text):
        return "when"
    if {first, last} & {"who", "whom", "whose"}:
        return "who"
    if (first == "where" and asks) or last == "where":
        return "where"
    return "open" if first in _WH_WORDS or last in _WH_WORDS else None


def polarity(text: str) -> Literal["yes", "no"] | None:
    """"yes" or "no" when the text opens with that word ("No, he was not."); else None."""
    words = normalize_answer(text).split()
    return words[0] if words and words[0] in ("yes", "no") else None  # type: ignore[return-value]


def declines(answer: str) -> bool:
    """Whether the answer states nothing: empty, or saying the text does not hold the answer."""
    said = normalize_answer(answer)
    return not said or said in _DECLINE_WHOLE or _DECLINE.search(answer) is not None


def _pieces(answer: str) -> list[str]:
    """The answer's words split at every mark, hyphens too: "two-time" holds "two", "27,340" two numerals."""
    return _PIECE.findall(answer.lower())


def has_number(answer: str) -> bool:
    """Whether the answer holds a numeral or a number word ("three", "twice", "27,340")."""
    return any(_NUMERAL.fullmatch(w) or w in _NUMBER_WORDS for w in _pieces(answer))


def has_date(answer: str) -> bool:
    """Whether the answer places something in time: a number, a month or a time word ("the Bronze Age")."""
    return has_number(answer) or any(w in _MONTHS or w in _TIME_WORDS for w in _pieces(answer))


def only_number_or_date(answer: str) -> bool:
    """Whether every word of the answer is a numeral, a number word or a month ("5 March 1990", "27,340")."""
    words = [w for w in _pieces(answer) if w not in _STOP_WORDS]
    return bool(words) and all(_NUMERAL.fullmatch(w) or w in _NUMBER_WORDS or w in _MONTHS for w in words)


def misfits_kind(kind: QuestionKind | None, answer: str) -> bool:
    """Whether an answer cannot be of ``kind`` by its words alone: a when-answer without a date, a how-many
    one without a number, a who or where one that is only a number or date. A yes/no, choice or open kind is
    never judged here: whether those fit needs more than the kind (references, or the question's options)."""
    if kind == "when":
        return not has_date(answer)
    if kind == "how_many":
        return not has_number(answer)
    if kind in ("who", "where"):
        return only_number_or_date(answer)
    return False


def echoes(question: str, answer: str) -> bool:
    """Whether every content word of the answer (stop words aside) is a word of the question."""
    # "Krilanovich's" names Krilanovich, on either side.
    content = [w for w in normalize_answer(_POSSESSIVE.sub("", answer)).split() if w not in _STOP_WORDS]
    asked = set(normalize_answer(_POSSESSIVE.sub("", question)).split())
    return bool(content) and all(w in asked for w in content)


def _misfits_question(question: str, answer: str) -> bool:
    kind = question_kind(question)
    if kind == "choice":
        return not _names_option(question, answer)
    if kind == "yes_no":
        words = normalize_answer(answer).split()
        return (polarity(answer) is None and len(words) >= YES_NO_STATEMENT_WORDS
                and any(w in _AUXILIARIES for w in words))
    return misfits_kind(kind, answer)


def _names_option(question: str, answer: str) -> bool:
    """Whether the answer matches one of the options the question names (False when it names none)."""
    options = comparison_options(question)
    return options is not None and any(matches(answer, o) for o in options)


def _echoes_unasked(question: str, answer: str) -> bool:
    """An echo that answers nothing: a comparison is answered by naming an option the question holds, and a
    yes/no question by yes or no, however much of the question the rest repeats ("No, it is not necessary")."""
    return echoes(question, answer) and polarity(answer) is None and not _names_option(question, answer)


def stopped_early(answer: str, hop_answers: Sequence[str]) -> bool:
    """Whether the answer is an earlier hop's: it matches an intermediate answer before the last and not the
    last one. The last is excluded because a chain that reached its end answers with it ("Who won the Orla
    Cup?" "Tomas Verhoef". "Where was he born?" "Zwolle". Final answer: Zwolle)."""
    if len(hop_answers) < 2 or matches(answer, hop_answers[-1]):
        return False
    return any(matches(answer, h) for h in hop_answers[:-1])


def check_answer(question: str, answer: str, hop_answers: Sequence[str] = ()) -> AnswerCheck | None:
    """The name of the first check the answer fails (:data:`ANSWER_CHECKS`, in order), or None when it passes
    them all.

    ``type``         the answer cannot be of the kind asked for: a when-question without a date, how-many without
                     a number, who/where with only a number or date, a comparison ("A or B?") answered with
                     neither option, or a yes/no question answered without yes or no by a statement (an
                     auxiliary verb in :data:`YES_NO_STATEMENT_WORDS` words or more)
    ``echo``         every content word of the answer is in the question, and it is neither an option the
                     question names nor a yes or no
    ``earlier_hop``  the answer is an earlier hop's (:func:`stopped_early`); ``hop_answers`` are the
                     intermediate answers a step-wise chain wrote for the question, in order, the last included

    A question whose kind cannot be told (Chinese, or no question word) skips the type check. An empty or
    declining answer fails nothing: it states nothing to check, and abstention handles it.
    """
    if declines(answer):
        return None
    if _misfits_question(question, answer):
        return "type"
    if _echoes_unasked(question, answer):
        return "echo"
    if stopped_early(answer, hop_answers):
        return "earlier_hop"
    return None
