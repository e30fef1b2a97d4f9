"""Demonstrations for DRAG and IterDRAG: what they hold and how they are stored.

A demonstrations file is JSON Lines, one demonstration per line (UTF-8, no pickle)::

    {"id": "5a8b...", "question": "...", "answer": "...",
     "documents": [{"id": "...", "title": "...", "text": "..."}, ...],
     "steps": [{"follow_up": "...", "answer": "...", "documents": [...]}, ...]}

``documents`` are those retrieved for the question, best first; each step is one follow-up
question of a self-ask chain, its intermediate answer and the documents retrieved for the
follow-up, best first. ``id``, ``documents`` and ``steps`` may be omitted (DRAG demonstrations
have no steps).

The stored documents are a cache of the retrieval the demonstration was made with, so a file
can be used with any ``k`` up to the one it was made with: a prompt shows the first ``k`` of
each stored list, and retrieves afresh from the index (for the question, or the follow-up) only
when a list holds fewer than ``k``. Demonstrations and the test question thus always carry the
same number of documents per retrieval, as in the paper. Making demonstrations is
:mod:`ragfunnel.scaling.demonstrations`'s job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragfunnel.atomic import atomic_open
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.errors import ConfigError, InputError, option
from ragfunnel.journal import read_jsonl
from ragfunnel.prompts.self_ask import FollowUp, Shot, display_order
from ragfunnel.types import Document


@dataclass(frozen=True)
class SelfAskStep:
    """One follow-up of a self-ask chain, its intermediate answer, and what was retrieved for it."""

    follow_up: str
    answer: str
    documents: tuple[Document, ...] = ()


@dataclass(frozen=True)
class Demonstration:
    """A solved training question shown to the model before the test question."""

    question: str
    answer: str
    documents: tuple[Document, ...] = ()  # retrieved for the question, best first
    steps: tuple[SelfAskStep, ...] = ()
    id: str = ""

    def __post_init__(self) -> None:
        if not self.question.strip():
            raise InputError(f"demonstration {self.id!r} has an empty question; give every demonstration one")
        if not self.answer.strip():
            raise InputError(f"demonstration {self.id!r} has an empty answer; give every demonstration one")

    def shot(self, index: CorpusIndex, k: int, *, self_ask: bool) -> Shot:
        """This demonstration as a prompt shows it, with ``k`` documents per retrieval.

        ``self_ask`` keeps the follow-ups and their documents (IterDRAG); without it only the
        question's documents, question and answer are shown (DRAG).
        """
        batches = [_top_k(self.documents, self.question, index, k)]
        if self_ask:
            batches += [_top_k(s.documents, s.follow_up, index, k) for s in self.steps]
        follow_ups = tuple(FollowUp(s.follow_up, s.answer) for s in self.steps) if self_ask else ()
        return Shot(self.question, self.answer, tuple(display_order(batches)), follow_ups)


def _top_k(stored: tuple[Document, ...], query: str, index: CorpusIndex, k: int) -> list[Document]:
    if len(stored) >= k:
        return list(stored[:k])
    return [d for d, _ in index.search_documents(query, k)]


def _document_json(d: Document) -> dict[str, str]:
    return {"id": d.id, "title": d.title, "text": d.text}


def demonstration_json(demo: Demonstration) -> dict[str, Any]:
    """The JSON object of one line of a demonstrations file."""
    return {
        "id": demo.id,
        "question": demo.question,
        "answer": demo.answer,
        "documents": [_document_json(d) for d in demo.documents],
        "steps": [{"follow_up": s.follow_up, "answer": s.answer, "documents": [_document_json(d) for d in s.documents]}
                  for s in demo.steps],
    }


def save_demonstrations(demos: Iterable[Demonstration], path: str | Path) -> None:
    """Write ``demos`` to ``path`` as JSON Lines (replacing it whole, never half-written)."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        for demo in demos:
            f.write(json.dumps(demonstration_json(demo), ensure_ascii=False) + "\n")


class _BadRow(Exception):
    pass


def _text(row: dict[str, Any], key: str, *, required: bool = True) -> str:
    value = row.get(key, None if required else "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise _BadRow(f"'{key}' must be a non-empty string")
    return value


def _documents(row: dict[str, Any], where: str) -> tuple[Document, ...]:
    items = row.get("documents", [])
    if not isinstance(items, list):
        raise _BadRow(f"'documents' of {where} must be a list")
    docs = []
    for i, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise _BadRow(f"document {i} of {where} must be an object with id, title and text")
        try:
            docs.append(Document(_text(item, "id"), _text(item, "title", required=False), _text(item, "text")))
        except _BadRow as e:
            raise _BadRow(f"document {i} of {where}: {e}") from None
    return tuple(docs)


def _parse(row: Any) -> Demonstration:
    if not isinstance(row, dict):
        raise _BadRow("each line must be a JSON object")
    steps = row.get("steps", [])
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise _BadRow("'steps' must be a list of objects with follow_up, answer and documents")
    parsed = []
    for i, s in enumerate(steps, start=1):
        try:
            parsed.append(SelfAskStep(_text(s, "follow_up"), _text(s, "answer"), _documents(s, f"step {i}")))
        except _BadRow as e:
            raise _BadRow(f"step {i}: {e}") from None
    return Demonstration(_text(row, "question"), _text(row, "answer"), _documents(row, "the question"),
                         tuple(parsed), str(row.get("id", "")))


def load_demonstrations(path: str | Path) -> list[Demonstration]:
    """Read a demonstrations file; a malformed line is reported as ``FILE:LINE: what is wrong``."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"demonstrations file {path} does not exist; make one with `ragfunnel scale demos`")
    demos = []
    for number, row in read_jsonl(path, what="demonstration"):
        try:
            demos.append(_parse(row))
        except (_BadRow, InputError) as e:
            raise InputError(f"{path}:{number}: {e}") from None
    if not demos:
        raise InputError(f"{path} holds no demonstrations; add at least one line")
    return demos


def check_shots(demos: Sequence[Demonstration], shots: int) -> list[Demonstration]:
    """The first ``shots`` demonstrations; too few is an error that says how many there are."""
    if shots < 0:
        raise ConfigError(f"{option('shots')} must be at least 0, got {shots}")
    if shots > len(demos):
        raise ConfigError(f"{option('shots')} {shots} needs {shots} demonstrations but only {len(demos)} were given "
                          f"({option('demonstrations')}, from `ragfunnel scale demos`); lower {option('shots')} to "
                          f"at most {len(demos)} or make more demonstrations")
    return list(demos[:shots])
