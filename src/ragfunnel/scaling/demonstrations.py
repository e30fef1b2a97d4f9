"""Demonstrations for DRAG and IterDRAG: what they hold, how they are stored, how they are made.

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
same number of documents per retrieval, as in the paper.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from ragfunnel.errors import ConfigError, InputError
from ragfunnel.eval.metrics import contains_answer
from ragfunnel.prompts.self_ask import FollowUp, Shot, display_order
from ragfunnel.types import Document, Example

if TYPE_CHECKING:
    from ragfunnel.corpus.index import CorpusIndex
    from ragfunnel.llm.base import LLM
    from ragfunnel.methods.iterdrag import IterDRAG

log = logging.getLogger(__name__)


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
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    with tmp.open("w", encoding="utf-8") as f:
        for demo in demos:
            f.write(json.dumps(demonstration_json(demo), ensure_ascii=False) + "\n")
    tmp.replace(path)


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
        raise InputError(f"demonstrations file {path} does not exist; make one with make_drag_demonstrations "
                         "or generate_iterdrag_demonstrations")
    demos = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                demos.append(_parse(json.loads(line)))
            except json.JSONDecodeError:
                raise InputError(f"{path}:{number}: not a JSON object; each line must be one demonstration") from None
            except (_BadRow, InputError) as e:
                raise InputError(f"{path}:{number}: {e}") from None
    if not demos:
        raise InputError(f"{path} holds no demonstrations; add at least one line")
    return demos


def check_shots(demos: Sequence[Demonstration], shots: int) -> list[Demonstration]:
    """The first ``shots`` demonstrations; too few is an error that says how many there are."""
    if shots < 0:
        raise ConfigError(f"shots must be >= 0, got {shots}")
    if shots > len(demos):
        raise ConfigError(f"{shots} shots need {shots} demonstrations but only {len(demos)} were given; "
                          f"lower shots to at most {len(demos)} or add training examples")
    return list(demos[:shots])


def _answered(example: Example) -> str:
    answers = [a for a in example.answers if a.strip()]
    if not answers:
        raise InputError(f"example {example.id!r} has no answer; a demonstration needs a training example "
                         "with its answer")
    return answers[0]


def make_drag_demonstrations(examples: Iterable[Example], index: CorpusIndex, k: int) -> list[Demonstration]:
    """DRAG demonstrations: each example's question, first answer and its top ``k`` documents."""
    demos = []
    for example in examples:
        answer = _answered(example)
        docs = tuple(d for d, _ in index.search_documents(example.question, k))
        demos.append(Demonstration(example.question, answer, docs, id=example.id))
    return demos


def generate_iterdrag_demonstrations(
    examples: Sequence[Example],
    index: CorpusIndex,
    llm: str | LLM,
    k: int,
    iterations: int = 5,
    *,
    out: str | Path | None = None,
    progress: bool = True,
) -> list[Demonstration]:
    """Self-ask demonstrations written by the model itself, IterDRAG with no shots.

    A chain is kept when it asked at least one follow-up and its final answer is right, which
    here means it *contains* a reference answer (``contains_answer``, after SQuAD
    normalisation): small models wrap correct answers in words, and exact match would keep
    almost nothing. The kept demonstration's answer line is the reference it contained, so the
    examples teach short answers.

    With ``out`` every kept demonstration is appended to that file as it is found, and every
    example tried is logged in ``OUT.log.jsonl`` (id, kept, why); a second call with the same
    ``out`` skips the examples already tried and returns the whole file.
    """
    # Imported here: the IterDRAG method itself loads demonstrations from this module.
    from ragfunnel.methods.iterdrag import IterDRAG

    method = IterDRAG(index=index, llm=llm, documents=k, shots=0, iterations=iterations)
    out = Path(out) if out is not None else None
    log_path = out.with_name(out.name + ".log.jsonl") if out else None
    kept: list[Demonstration] = []
    tried: set[str] = set()
    if out and log_path:
        _cut_torn_line(out)
        _cut_torn_line(log_path)
        if out.exists() and out.stat().st_size:
            kept = load_demonstrations(out)
        if log_path.exists():
            tried = {json.loads(line)["id"] for line in log_path.read_text(encoding="utf-8").splitlines()}
        tried |= {d.id for d in kept}  # a kill between the two appends logs nothing, yet the demo is kept
    todo = [e for e in examples if e.id not in tried]
    if tried:
        log.info("resuming %s: %d examples tried, %d to go", out, len(tried), len(todo))
    with tqdm(todo, desc="self-ask demonstrations", unit="question", disable=None if progress else True) as bar:
        for example in bar:
            demo, why = _attempt(method, example)
            if demo is not None:
                kept.append(demo)
                if out:
                    _append(out, demonstration_json(demo))
            if log_path:
                _append(log_path, {"id": example.id, "kept": demo is not None, "why": why})
            bar.set_postfix(kept=len(kept))
    return kept


def _attempt(method: IterDRAG, example: Example) -> tuple[Demonstration | None, str]:
    references = [a for a in example.answers if a.strip()]
    if not references:
        return None, "no reference answer"
    try:
        chain = method.reason(example.question)
    except ConfigError as e:  # e.g. a prompt too long for the model: this example only, go on
        log.warning("example %s: %s", example.id, e)
        return None, f"failed: {e}"
    if not chain.steps:
        return None, "no follow-up"
    right = [r for r in references if contains_answer(chain.answer, r)]
    if not right:
        return None, f"wrong final answer {chain.answer!r}"
    return Demonstration(example.question, right[0], chain.documents, chain.steps, id=example.id), "kept"


def _append(path: Path, row: dict[str, Any]) -> None:
    """Append one JSONL row durably: a kill can tear only the line in flight."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _cut_torn_line(path: Path) -> None:
    """Drop a partial last line (a run killed mid-write), so appending resumes on a line boundary."""
    if not path.exists():
        return
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        log.warning("%s ends in a partial line (a run was killed mid-write); dropping it", path)
        with path.open("r+b") as f:
            f.truncate(keep)
