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

from ragfunnel.confidence.measures import RIGHT_AT, is_right
from ragfunnel.metrics import best_over_references, normalize_answer, token_f1
from ragfunnel.text.scripts import CHINESE_STOPWORDS, has_han_or_kana
from ragfunnel.types import Example

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

QuestionKind = Literal["yes_no", "choice", "when", "how_many", "who", "where", "open"]

# The same bar as a right answer's F1: an answer "matches" an intermediate answer or an option exactly as
# it would have matched a reference.
MATCH_AT = RIGHT_AT

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
_DISAMBIGUATION = re.compile(r"\s*\([^)]*\)\s*$")
_BETWEEN = re.compile(r"\s*between\s+(?P<a>[^,]+?)\s+and\s+(?P<b>[^,]+?)\s*,", re.IGNORECASE)
_DECLINE = re.compile(r"\b(?:unanswerable|not (?:mentioned|stated|specified|provided|given|found|known)|"
                      r"no (?:information|answer)|(?:cannot|can't|can not) be (?:determined|found|answered)|"
                      r"(?:i )?(?:do not|don't) know)\b", re.IGNORECASE)
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
    before, after = question[:found.start()], question[found.end():].strip().rstrip("?").strip()
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


def _has_number(answer: str) -> bool:
    return any(_NUMERAL.fullmatch(w) or w in _NUMBER_WORDS for w in _pieces(answer))


def _has_date(answer: str) -> bool:
    return _has_number(answer) or any(w in _MONTHS or w in _TIME_WORDS for w in _pieces(answer))


def _only_number_or_date(answer: str) -> bool:
    """Whether every word of the answer is a numeral, a number word or a month ("5 March 1990", "27,340")."""
    words = [w for w in _pieces(answer) if w not in _STOP_WORDS]
    return bool(words) and all(_NUMERAL.fullmatch(w) or w in _NUMBER_WORDS or w in _MONTHS for w in words)


def wrong_type(question: str, answer: str, references: Sequence[str]) -> bool:
    """Whether the answer cannot be of the kind the question asks for (see :func:`question_kind`).

    A yes/no question counts only when its references are yes or no too: an auxiliary-led question whose
    reference is a name was not asking for yes or no.
    """
    kind = question_kind(question)
    if kind == "yes_no":
        return polarity(answer) is None and bool(references) and all(polarity(r) for r in references)
    if kind == "when":
        return not _has_date(answer)
    if kind == "how_many":
        return not _has_number(answer)
    if kind in ("who", "where"):
        return _only_number_or_date(answer)
    return False


def echoes(question: str, answer: str) -> bool:
    """Whether every content word of the answer (stop words aside) is a word of the question."""
    # "Krilanovich's" names Krilanovich, on either side.
    content = [w for w in normalize_answer(_POSSESSIVE.sub("", answer)).split() if w not in _STOP_WORDS]
    asked = set(normalize_answer(_POSSESSIVE.sub("", question)).split())
    return bool(content) and all(w in asked for w in content)


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
