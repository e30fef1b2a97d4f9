"""Prompts for DRAG and IterDRAG, the self-ask step parser, and grammars for one step.

Layout (after the inference-scaling paper's Figure 16; the wording is ragfunnel's own): an
instruction, then the demonstrations, each with its documents, question and answer (for
IterDRAG the answer is written out as self-ask lines), then the test documents and question.
Documents appear one per line as ``Document [i] (Title: ...) text``, in reverse rank order so
the best document sits nearest the question.

IterDRAG asks the model for one line per call:

``Follow up: Q``                a simpler question; documents retrieved for Q join the context
``Intermediate answer: A``     the answer to the last follow-up (the only line allowed after one)
``So the final answer is: A``  the answer to the main question
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ragfunnel.prompts.parsing import clean_answer
from ragfunnel.types import Document

FOLLOW_UP, INTERMEDIATE, FINAL = "Follow up:", "Intermediate answer:", "So the final answer is:"

StepKind = Literal["follow_up", "intermediate", "final"]

# The paper cuts every document to its first 1,024 whitespace-separated words.
MAX_DOCUMENT_WORDS = 1024

# One step is one line after its prefix, starting with a visible character (tiny models otherwise
# fill it with spaces). The line may close with a newline, after which only the end of the reply
# can follow: a model that wants to start the next line stops instead of running on. (Checking a
# grammar against Qwen's 152k-token vocabulary costs ~25 ms per generated token.)
_LINE = 'line ::= [^ \\t\\n] [^\\n]* "\\n"?\n'
STEP_GRAMMAR = f'root ::= ("{FOLLOW_UP} " | "{FINAL} ") line\n{_LINE}'
INTERMEDIATE_GRAMMAR = f'root ::= "{INTERMEDIATE} " line\n{_LINE}'
# The forced final call's prompt already ends with the final-answer prefix: only the answer follows.
FINAL_GRAMMAR = f"root ::= line\n{_LINE}"
# A model may write a whole chain in one reply (on one line under the grammar); cut it at the next step.
STEP_STOP = tuple(f"{sep}{prefix}" for prefix in (FOLLOW_UP, INTERMEDIATE, FINAL) for sep in ("\n", " "))


@dataclass(frozen=True)
class FollowUp:
    """One follow-up question of a self-ask chain and its intermediate answer."""

    question: str
    answer: str


@dataclass(frozen=True)
class Shot:
    """A demonstration as a prompt shows it: documents (display order), question, follow-ups, answer."""

    question: str
    answer: str
    documents: tuple[Document, ...] = ()
    follow_ups: tuple[FollowUp, ...] = ()


@dataclass(frozen=True)
class Step:
    """What one IterDRAG call produced. ``prefixed`` is False when the kind was inferred from bare text."""

    kind: StepKind
    text: str
    prefixed: bool


def display_order(batches: Sequence[Sequence[Document]]) -> list[Document]:
    """Documents in the order a prompt shows them, each once (by id; its first retrieval places it).

    Each batch is one retrieval, best first, and is shown reversed so its best document comes
    last. Later batches (follow-ups) come after earlier ones: nearest the question, and the
    prompt up to them stays the same between calls, so llama.cpp reuses its cached prefix.
    """
    seen: set[str] = set()
    shown = []
    for batch in batches:
        new = [d for d in batch if d.id not in seen]
        seen.update(d.id for d in new)
        shown += reversed(new)
    return shown


def render_documents(documents: Sequence[Document]) -> str:
    """One line per document, numbered in the order given (a passage of one long text has no title to show)."""
    lines = []
    for i, d in enumerate(documents, start=1):
        words = d.text.split()[:MAX_DOCUMENT_WORDS]
        title = d.title.replace("\n", " ").strip()
        lines.append(f"Document [{i}] (Title: {title}) {' '.join(words)}" if title else
                     f"Document [{i}] {' '.join(words)}")
    return "\n".join(lines)


_QA_INTRO = "You answer questions from what you know."
_QA_SHOTS = "Worked examples come first, each a question and its answer."
_QA_TASK = "Now the question to answer."
_DRAG_INTRO = "You answer questions with the help of documents found by a search engine; some may not be relevant."
_DRAG_SHOTS = "Worked examples come first. Each lists its documents, then a question and its answer."
_DRAG_TASK = "Now the question to answer, after its own documents."
_ITER_INTRO = ("You answer questions that may take several steps, with the help of documents found by a search "
               "engine; some may not be relevant.")
_ITER_SHOTS = ("Worked examples come first. Each lists its documents and a question, then the reasoning that "
               "answers it.")
_ITER_FORMAT = (f"Reason one line at a time. Unless one document answers the question outright, begin with "
                f"'{FOLLOW_UP} ' and a simpler question about the first fact it depends on; documents for it "
                f"are added, then write '{INTERMEDIATE} ' and its answer. Ask further follow-ups the same way. "
                f"Once the main question can be answered, write '{FINAL} ' and the answer as a short phrase.")
_ITER_TASK = "Now the question to answer, after its own documents. Write only the next line."


def _block(documents: Sequence[Document], question: str) -> list[str]:
    docs = [render_documents(documents), ""] if documents else []
    return [*docs, f"Question: {question.strip()}"]


def _self_ask_lines(follow_ups: Sequence[FollowUp]) -> list[str]:
    return [line for f in follow_ups for line in (f"{FOLLOW_UP} {f.question}", f"{INTERMEDIATE} {f.answer}")]


def drag_prompt(question: str, documents: Sequence[Document], shots: Sequence[Shot], *, style: str) -> str:
    """DRAG: the instruction, ``shots`` (question and answer only), the test documents and question.

    ``documents`` and every shot's documents are in display order (see :func:`display_order`);
    ``style`` says how the answer should look (the task's answer style).
    """
    # With no documents anywhere (k = 0) this is plain or many-shot QA, and the instruction says so.
    if documents or any(shot.documents for shot in shots):
        intro, shots_note, task = _DRAG_INTRO, _DRAG_SHOTS, _DRAG_TASK
    else:
        intro, shots_note, task = _QA_INTRO, _QA_SHOTS, _QA_TASK
    lines = [f"{intro} {shots_note}" if shots else intro, ""]
    for shot in shots:
        lines += [*_block(shot.documents, shot.question), f"Answer: {shot.answer}", ""]
    lines += [f"{task} {style}" if shots else style, "", *_block(documents, question), "Answer:"]
    return "\n".join(lines)


def iterdrag_prompt(
    question: str,
    documents: Sequence[Document],
    shots: Sequence[Shot],
    follow_ups: Sequence[FollowUp],
    *,
    pending: str | None = None,
    force_final: bool = False,
) -> str:
    """One IterDRAG call: the instruction, ``shots`` as self-ask chains, the test documents and
    question, and the chain so far.

    ``pending`` is a follow-up still waiting for its answer: the prompt ends with it, so the
    reply should be its intermediate answer. ``force_final`` ends the prompt with the
    final-answer prefix, so the reply is the answer.
    """
    lines = [f"{_ITER_INTRO} {_ITER_SHOTS}" if shots else _ITER_INTRO, ""]
    for shot in shots:
        lines += [*_block(shot.documents, shot.question), *_self_ask_lines(shot.follow_ups),
                  f"{FINAL} {shot.answer}", ""]
    lines += [f"{_ITER_FORMAT} {_ITER_TASK}", "", *_block(documents, question), *_self_ask_lines(follow_ups)]
    if pending is not None:
        lines.append(f"{FOLLOW_UP} {pending}")
    if force_final:
        lines.append(FINAL)
    return "\n".join(lines)


# A step prefix anywhere in a reply, tolerating markdown ("**Follow up:**", "*Follow-up*:"),
# case, and "So the final answer is" written without its colon.
_PREFIX = re.compile(
    r"(?:(?P<follow_up>\bfollow[\s-]*up(?:\s+question)?(?:\s*\d+)?)"
    r"|(?P<intermediate>\bintermediate\s+answer(?:\s*\d+)?)"
    r"|(?P<final>\b(?:so\s+)?(?:the\s+)?final\s+answer(?:\s+is)?))"
    r"\s*[*_]*\s*:[*_]*"
    r"|(?P<final_is>\bso\s+the\s+final\s+answer\s+is\b)[*_]*",
    re.IGNORECASE,
)
_KIND: dict[str, StepKind] = {"follow_up": "follow_up", "intermediate": "intermediate", "final": "final",
                              "final_is": "final"}
_CANONICAL: dict[StepKind, str] = {"follow_up": FOLLOW_UP, "intermediate": INTERMEDIATE, "final": FINAL}
_DECORATION = " \t*_`\"'"


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip().strip(_DECORATION).strip()
        if line:
            return line
    return ""


def _truncated_prefix(text: str) -> StepKind | None:
    """The step kind whose prefix ``text`` is the start of (a reply cut off inside its prefix).

    Four characters at least, so that a one-word bare answer such as "In" is not taken for one.
    """
    head = " ".join(text.strip(_DECORATION).lower().replace("-", " ").split())
    if len(head) < 4:
        return None
    for kind, prefix in _CANONICAL.items():
        if prefix.lower().startswith(head):
            return kind
    return None


def parse_step(text: str, *, after_follow_up: bool = False) -> Step:
    """Classify one IterDRAG reply as a follow-up, an intermediate answer or a final answer. Never raises.

    The first complete step wins: a prefix followed by text on its line (or, when the line is
    empty, on the next). Bare text is read by the state of the chain: right after a follow-up it
    is the intermediate answer; otherwise a question is a follow-up and anything else the final
    answer. A reply cut off inside a prefix, or a prefix with no text, gives an empty ``text``.
    """
    first_incomplete: StepKind | None = None
    matches = list(_PREFIX.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        kind = _KIND[m.lastgroup or "final"]
        body = _first_line(text[m.end():end])
        if body:
            return Step(kind, body, prefixed=True)
        first_incomplete = first_incomplete or kind
    if first_incomplete:
        return Step(first_incomplete, "", prefixed=True)
    cut = _truncated_prefix(text)
    if cut:
        return Step(cut, "", prefixed=True)
    bare = clean_answer(text).strip(_DECORATION).strip()
    if after_follow_up:
        return Step("intermediate", bare, prefixed=False)
    return Step("follow_up" if bare.endswith("?") else "final", bare, prefixed=False)


def parse_final(text: str) -> str:
    """The answer in a reply to a prompt ending with the final-answer prefix (which models often echo, or
    replace with the intermediate-answer prefix they wrote last: the text after either is the answer)."""
    step = parse_step(text)
    if step.kind in ("final", "intermediate") and step.prefixed and step.text:
        return step.text
    return clean_answer(text).strip(_DECORATION).strip()
