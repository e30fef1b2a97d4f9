"""Reading model replies. Small models often ignore the format, so parsing never fails."""

from __future__ import annotations

import re

from ragfunnel.types import Sample


def option_letters(choices: list[str]) -> list[str]:
    """The letters options are shown with: A, B, C, ..."""
    return [chr(ord("A") + i) for i in range(len(choices))]

# Markdown emphasis around the labels ("**Answer:**", "**Answer**:") is common in small models' replies.
_ANSWER = re.compile(r"\**\banswer\**\s*:\**", re.IGNORECASE)
_RATIONALE = re.compile(r"^\s*\**\s*(?:the\s+)?rationale\s*(?:is)?\s*\**\s*:\s*\**\s*", re.IGNORECASE)
_LEAD = re.compile(r"^\s*\**\s*(final\s+)?answer\s*\**\s*:\s*\**\s*", re.IGNORECASE)


def parse_sample(text: str) -> Sample:
    """Split a "Rationale: ... Answer: ..." reply.

    The last "Answer:" splits the two parts. With no "Answer:" (the model ran out of
    tokens, or ignored the format) everything is rationale and the answer is empty; the
    whole text still serves as the forward-lookup query.
    """
    matches = list(_ANSWER.finditer(text))
    if matches:
        cut = matches[-1]
        rationale, answer = text[: cut.start()], clean_answer(text[cut.end() :])
    else:
        rationale, answer = text, ""
    previous = None
    while previous != rationale:  # "Rationale: The rationale is: ..." carries the label twice
        previous, rationale = rationale, _RATIONALE.sub("", rationale)
    return Sample(text=text, rationale=rationale.strip(), answer=answer)


def clean_answer(text: str, *, first_line: bool = True) -> str:
    """The answer in a direct reply: drop an echoed "Answer:"; keep the first non-empty line
    unless ``first_line`` is False (summaries span lines)."""
    text = _LEAD.sub("", text.strip())
    if not first_line:
        return text.strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def is_unanswerable(answer: str) -> bool:
    """Whether a reply declines to answer (Self-Route's signal to fall back to the full context)."""
    return "unanswerable" in answer.lower()


# Where a reply names its option, most explicit first: "the answer is (C)", "(C)", a bare letter that is not
# the English word "A" or "I" starting a sentence ("A good guess is B" names B).
_NAMED_LETTER = (
    re.compile(r"\b(?:answer|option|choice)\s*(?:is|:)?\s*\(?([A-Z])\b", re.IGNORECASE),
    re.compile(r"\(([A-Z])\)"),
    re.compile(r"\b([A-Z])\b(?!\s+[a-z])"),
)


def _comparable(text: str) -> str:
    """Lower case, punctuation as spaces, whitespace squeezed: how an option's text is recognised in a reply."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def option_index(reply: str, choices: list[str]) -> int | None:
    """Which of ``choices`` a reply picks: the option whose text it is, else the letter it names; None if neither."""
    same = [i for i, c in enumerate(choices) if _comparable(c) == _comparable(reply)]
    if len(same) == 1:
        return same[0]
    letters = option_letters(choices)
    for pattern in _NAMED_LETTER:
        for m in pattern.finditer(reply.strip()):
            if (letter := m.group(1).upper()) in letters:
                return letters.index(letter)
    return None


def chosen_option(reply: str, choices: list[str]) -> str | None:
    """The text of the option a reply picks (see :func:`option_index`)."""
    i = option_index(reply, choices)
    return None if i is None else choices[i]
