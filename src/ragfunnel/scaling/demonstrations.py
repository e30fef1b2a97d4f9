"""Making demonstrations for DRAG and IterDRAG from training questions (their data and file format
are :mod:`ragfunnel.methods.demonstrations`'s).

DRAG demonstrations are a question, its answer and its retrieved documents; IterDRAG ones are
self-ask chains the model writes itself, kept when the final answer holds a reference answer.
Either kind can be added to a file as it is made, resuming where an earlier run stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from functools import partial
from pathlib import Path

from tqdm.auto import tqdm

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.errors import BackendUnavailable, InputError, RagfunnelError
from ragfunnel.journal import VERSION_KEY, Appender, exclusive, out_file, read_jsonl, saving
from ragfunnel.llm.base import LLM
from ragfunnel.methods.config import IterDragConfig
from ragfunnel.methods.demonstrations import Demonstration, demonstration_json, load_demonstrations
from ragfunnel.methods.iterdrag import IterDRAG
from ragfunnel.metrics import contains_answer
from ragfunnel.types import Example
from ragfunnel.version import __version__

log = logging.getLogger(__name__)


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
    strong: str | LLM,
    k: int,
    iterations: int = 5,
    *,
    out: str | Path | None = None,
    progress: bool = True,
) -> list[Demonstration]:
    """Self-ask demonstrations written by the answering model itself, IterDRAG with no shots.

    A chain is kept when it asked at least one follow-up and its final answer is right, which
    here means it *contains* a reference answer (``contains_answer``, after SQuAD
    normalisation): small models wrap correct answers in words, and exact match would keep
    almost nothing. The kept demonstration's answer line is the reference it contained, so the
    examples teach short answers.

    With ``out`` the demonstrations are added to that file as they are found (see
    :func:`extend_demonstrations`); a second call with the same ``out`` goes on where it stopped.
    """
    method = IterDRAG(IterDragConfig(documents=k, shots=0, iterations=iterations), index=index, strong=strong)
    attempt = partial(_attempt, method)
    if out is not None:
        return extend_demonstrations(examples, out, attempt, desc="self-ask demonstrations", progress=progress)
    kept = []
    for example in tqdm(examples, desc="self-ask demonstrations", unit="question", disable=None if progress else True):
        demo, _ = attempt(example)
        if demo is not None:
            kept.append(demo)
    return kept


def extend_demonstrations(examples: Sequence[Example], out: str | Path,
                          attempt: Callable[[Example], tuple[Demonstration | None, str]], *,
                          desc: str = "demonstrations", progress: bool = True) -> list[Demonstration]:
    """Try ``attempt`` on each example not tried before, appending what it keeps to ``out``; returns the
    whole file. Nothing in ``out`` is ever rewritten or dropped.

    Every example tried is logged in ``OUT.log.jsonl`` (id, kept, why, and the ragfunnel version that
    tried it: a file may be extended by several versions), so a second call skips the
    examples already tried; one process at a time may extend a file (``OUT.lock``). Ctrl-C keeps
    everything found so far and raises :class:`Interrupted`.
    """
    out = out_file(Path(out))
    log_path = out.with_name(out.name + ".log.jsonl")
    with exclusive(out.with_name(out.name + ".lock"), out):
        kept = load_demonstrations(out) if out.exists() and out.stat().st_size else []
        # A kill between the two appends logs nothing, yet the demonstration is kept.
        tried = {str(row.get("id")) for _, row in read_jsonl(log_path)} | {d.id for d in kept}
        todo = [e for e in examples if e.id not in tried]
        if tried:
            log.info("resuming %s: %d examples tried, %d to go", out, len(tried), len(todo))
        with closing(Appender(out)) as demos, closing(Appender(log_path)) as attempts, \
                saving(out, lambda: len(kept)), \
                tqdm(todo, desc=desc, unit="question", disable=None if progress else True) as bar:
            for example in bar:
                demo, why = attempt(example)
                if demo is not None:
                    kept.append(demo)
                    demos.append(demonstration_json(demo))
                attempts.append({"id": example.id, "kept": demo is not None, "why": why, VERSION_KEY: __version__})
                bar.set_postfix(kept=len(kept))
    return kept


def drag_attempt(index: CorpusIndex, k: int) -> Callable[[Example], tuple[Demonstration | None, str]]:
    """:func:`extend_demonstrations`'s attempt for DRAG: every example with an answer is kept."""
    def attempt(example: Example) -> tuple[Demonstration | None, str]:
        if not any(a.strip() for a in example.answers):
            return None, "no reference answer"
        (demo,) = make_drag_demonstrations([example], index, k)
        return demo, "kept"

    return attempt


def _attempt(method: IterDRAG, example: Example) -> tuple[Demonstration | None, str]:
    references = [a for a in example.answers if a.strip()]
    if not references:
        return None, "no reference answer"
    try:
        chain = method.reason(example.question)
    except BackendUnavailable:  # not this example's fault: the run stops and resumes here
        raise
    except RagfunnelError as e:  # e.g. a prompt too long for the model: this example only, go on
        log.warning("example %s: %s", example.id, e)
        return None, f"failed: {e}"
    if not chain.steps:
        return None, "no follow-up"
    right = [r for r in references if contains_answer(chain.answer, r)]
    if not right:
        return None, f"wrong final answer {chain.answer!r}"
    return Demonstration(example.question, right[0], chain.documents, chain.steps, id=example.id), "kept"
