"""Loading question sets and corpora from local files into typed records.

Question formats (``format=``):

``hotpotqa``   ``_id``, ``question``, ``answer``, ``context`` as ``[[title, [sentences]], ...]`` or
               ``{"title": [...], "sentences": [[...], ...]}``, optional ``supporting_facts``
``musique``    ``id``, ``question``, ``answer``, ``answer_aliases``, ``paragraphs``
               (``{title, paragraph_text, is_supporting}``), optional ``question_decomposition``
               (``[{question, answer}, ...]``: every sub-answer but the last goes to ``meta["hop_answers"]``)
``nq-open``    ``question``, ``answer`` (a list of accepted strings); no context
``longbench``  ``input``, ``context``, ``answers``, optional ``all_classes``, ``_id``, ``dataset``; a
               dataset LongBench knows (``qasper``, ``qmsum``, ...) picks its task ``longbench/<dataset>``
               (its prompt, answer limit and kind: qmsum is a summary), else the task is ``qa``
``infbench``   InfiniteBench (∞Bench) ``en.qa``/``en.mc``: ``id``, ``input``, ``context``, ``answer``
               (list), ``options`` (multiple choice; the answer is the correct option's text); tasks
               ``infbench/en.qa`` and ``infbench/en.mc`` (64-token answers)
``jsonl``      ragfunnel's own: ``question``, ``answers`` (list) or ``answer`` (string; FlashRAG's
               ``golden_answers`` is read too), optional
               ``id``, ``context`` (or ``context_file``: a document of any format
               ragfunnel.documents reads, relative to the dataset file and inside its folder),
               ``choices``, ``task``, ``hop_answers`` (the question's intermediate answers, a list of
               strings, into ``meta["hop_answers"]``), ``meta``
``auto``       pick one of the above from the first record's fields

Files may be a JSON list or JSON Lines, and must be regular files (never a FIFO or a device), opened through
:mod:`ragfunnel.bounded`: a JSON list is read whole up to :data:`MAX_DATASET_BYTES`, JSON Lines a line at a
time, each at most :data:`MAX_DATASET_LINE_BYTES`. A malformed row is reported with its file and line;
``on_error="fail"`` stops there, ``on_error="skip"`` keeps going and returns every problem in
:attr:`Loaded.errors` (and logs it) — rows are never dropped silently.

Corpora are read by :func:`ragfunnel.corpus.load_corpus`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

from ragfunnel.bounded import (
    MAX_JSON_DEPTH,
    TooDeep,
    TooManyDigits,
    loads,
    numbered_lines,
    open_regular_file,
    read_regular_file,
)
from ragfunnel.documents import read_document, resolved
from ragfunnel.errors import ConfigError, InputError, option
from ragfunnel.prompts import TASKS
from ragfunnel.prompts.longbench import longbench_task
from ragfunnel.prompts.parsing import option_letters
from ragfunnel.text.hygiene import RecordCleaner
from ragfunnel.types import Document, Example

log = logging.getLogger(__name__)

# A JSON list is read and parsed whole, in memory several times its size. The largest question set published
# in that form (HotpotQA's training set) is under 600 MB, so this leaves room and still stops a runaway file;
# JSON Lines is read a line at a time.
MAX_DATASET_BYTES = 2 << 30
# One question a line, its context included: long-context benchmarks reach about two million words (LongBench
# v2), some 15 MB, so this leaves room, while a file without newlines (a sparse file's NULs) stops here.
MAX_DATASET_LINE_BYTES = 128 << 20
_FIX = "pass one .json or .jsonl file"
_LIST_FIX = f"pass a JSON list of at most {MAX_DATASET_BYTES >> 30} GiB, or a larger dataset as JSON Lines"
_LINE_FIX = f"pass a JSON Lines dataset: one question a line, each under {MAX_DATASET_LINE_BYTES >> 20} MiB"


class RowError(ValueError):
    """A row that cannot become an Example; the message says what is wrong with it."""


@dataclass(frozen=True)
class BadRow:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class Loaded:
    examples: list[Example]
    errors: list[BadRow] = field(default_factory=list)


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed record) for a JSON list or a JSON Lines file."""
    if not path.exists():
        raise InputError(f"dataset file {path} does not exist; check the path")
    if path.is_dir():
        raise InputError(f"dataset path {path} is a directory; pass one .json or .jsonl file")
    with open_regular_file(path, what="dataset file", fix=_FIX) as file:
        first = _first_byte(file)
        if not first:
            raise InputError(f"dataset file {path} is empty; pass a file with at least one question")
        if first != b"[":
            file.seek(0)
            for number, line in _text_lines(file, path):
                if line.strip():
                    yield number, _row(line)
            return
    # A JSON list has no line per record; report 1-based record numbers instead.
    yield from enumerate(_json_list(path), start=1)


def _first_byte(file: BinaryIO) -> bytes:
    """The first byte of ``file`` that is not whitespace (``b""`` if there is none), read a piece at a time:
    a JSON list may be one line of hundreds of megabytes, longer than a JSON Lines row may be."""
    while piece := file.read(1 << 16):
        if text := piece.lstrip():
            return text[:1]
    return b""


def _text_lines(file: BinaryIO, path: Path) -> Iterator[tuple[int, str]]:
    for number, raw in numbered_lines(file, path, max_line_bytes=MAX_DATASET_LINE_BYTES, what="dataset file",
                                      fix=_LINE_FIX):
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{path}:{number} is not UTF-8 text; pass a JSON or JSON Lines file") from None


def _row(line: str) -> Any:
    """A JSON Lines row parsed, or the :class:`RowError` saying why it cannot be."""
    try:
        return loads(line)
    except json.JSONDecodeError as e:
        return RowError(f"not valid JSON ({e.msg})")
    except TooDeep:
        return RowError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    except TooManyDigits as e:
        return RowError(f"{e}, more than Python reads as a number; write it as a string")


def _json_list(path: Path) -> list:
    raw = read_regular_file(path, max_bytes=MAX_DATASET_BYTES, what="dataset file", fix=_LIST_FIX)
    try:
        return loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text; pass a JSON or JSON Lines file") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); fix the file") from None
    except TooDeep:
        raise InputError(f"{path} nests JSON deeper than {MAX_JSON_DEPTH} levels; fix the file") from None
    except TooManyDigits as e:
        raise InputError(f"{path}: {e}, more than Python reads as a number; write it as a string") from None


def _require(record: dict, *keys: str) -> None:
    missing = [k for k in keys if k not in record or record[k] in (None, "", [])]
    if missing:
        raise RowError(f"missing {', '.join(repr(k) for k in missing)}")


def _text(record: dict, key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise RowError(f"{key!r} must be a string, got {type(value).__name__}")
    return value


def _optional_text(record: dict, key: str) -> str | None:
    return None if record.get(key) is None else _text(record, key)


def _answers(value: Any, *, as_written: bool = False) -> list[str]:
    """The non-empty reference answers, stripped unless ``as_written`` (LongBench scores code lines with
    their indentation)."""
    values = value if isinstance(value, list) else [value]
    if (odd := next((v for v in values if not isinstance(v, str | int | float)), None)) is not None:
        raise RowError(f"answers must be strings or numbers, got {type(odd).__name__}")
    answers = [str(v) if as_written else str(v).strip() for v in values if str(v).strip()]
    if not answers:
        raise RowError("no non-empty answer")
    return answers


def _choices(value: Any) -> list[str] | None:
    """Options of a multiple-choice row: None, or a list of option strings (never one string of letters)."""
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise RowError(f"'choices' must be a list of option strings like [\"yes\", \"no\"], "
                       f"got {json.dumps(value)[:60]}")
    return value


def _task(value: Any) -> str:
    if value not in TASKS:
        raise RowError(f"'task' must be one of {', '.join(TASKS)}, got {json.dumps(value)[:40]}")
    return value


def _meta(value: Any) -> dict:
    if value is not None and not isinstance(value, dict):
        raise RowError(f"'meta' must be an object, got {type(value).__name__}")
    return value or {}


def _join(docs: list[Document]) -> str:
    return "\n\n".join(d.render() for d in docs)


def _hotpotqa(record: dict, index: int) -> Example:
    _require(record, "question", "answer", "context")
    ctx = record["context"]
    if isinstance(ctx, dict):  # Hugging Face form: {"title": [...], "sentences": [[...], ...]}
        pairs = list(zip(ctx.get("title", []), ctx.get("sentences", []), strict=False))
    else:
        pairs = [(p[0], p[1]) for p in ctx if isinstance(p, list | tuple) and len(p) >= 2]
    if not pairs:
        raise RowError("'context' holds no [title, sentences] paragraphs")
    if not all(isinstance(sents, list) and all(isinstance(x, str) for x in sents) for _, sents in pairs):
        raise RowError("'context' paragraphs must hold lists of sentence strings")
    docs = [Document(str(title), str(title), "".join(sents)) for title, sents in pairs]
    facts = record.get("supporting_facts") or []
    if isinstance(facts, dict):
        titles = list(facts.get("title", []))
    else:  # [[title, sent_id], ...] or AMOR's [title, [ids], [sentences], {...}]
        titles = [f[0] for f in facts if isinstance(f, list | tuple) and f]
    return Example(
        id=str(record.get("_id") or record.get("id") or index),
        question=_text(record, "question"),
        context=_join(docs),
        answers=_answers(record["answer"]),
        task="multihop",
        meta={"titles": [d.title for d in docs], "supporting_titles": sorted(set(titles)),
              "type": record.get("type"), "level": record.get("level")},
        passages=docs,
    )


def _hop_answers(value: Any) -> list[str]:
    """A row's intermediate answers: a list of strings (empty ones dropped)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RowError(f"'hop_answers' must be a list of strings, got {json.dumps(value)[:60]}")
    return [v.strip() for v in value if v.strip()]


def _decomposition_hops(value: Any) -> list[str]:
    """The answers of a MuSiQue decomposition's sub-questions but the last (whose answer is the question's):
    the intermediate answers a model may stop at, kept so a wrong answer can be told to be one of them."""
    if not isinstance(value, list) or not all(isinstance(step, dict) for step in value):
        raise RowError("'question_decomposition' must be a list of {question, answer} objects")
    return _hop_answers([step.get("answer", "") for step in value[:-1]])


def _musique(record: dict, index: int) -> Example:
    _require(record, "question", "answer", "paragraphs")
    paras = record["paragraphs"]
    if not isinstance(paras, list) or not all(isinstance(p, dict) for p in paras):
        raise RowError("'paragraphs' must be a list of {title, paragraph_text, is_supporting} objects")
    hops = _decomposition_hops(record["question_decomposition"]) if record.get("question_decomposition") else None
    docs = [Document(str(p.get("idx", i)), p.get("title", ""), p.get("paragraph_text", ""))
            for i, p in enumerate(paras)]
    return Example(
        id=str(record.get("id") or index),
        question=_text(record, "question"),
        context=_join(docs),
        answers=_answers([record["answer"], *(record.get("answer_aliases") or [])]),
        task="multihop",
        meta={"titles": [d.title for d in docs],
              "supporting_titles": [p.get("title", "") for p in paras if p.get("is_supporting")],
              "supporting_positions": [i for i, p in enumerate(paras) if p.get("is_supporting")]}
        | ({} if hops is None else {"hop_answers": hops}),
        passages=docs,
    )


def _nq_open(record: dict, index: int) -> Example:
    _require(record, "question", "answer")
    return Example(id=str(record.get("id") or index), question=_text(record, "question"),
                   answers=_answers(record["answer"]))


def _longbench(record: dict, index: int) -> Example:
    """A LongBench row; its ``dataset`` picks the task (prompt, answer limit, scoring kind) when LongBench knows it."""
    _require(record, "context", "answers")
    dataset = _optional_text(record, "dataset")
    task = longbench_task(dataset)
    if dataset and not task:
        _warn_once(f"dataset {dataset!r} is not one LongBench knows; its rows get the generic qa task "
                   "(check the name, or set the task option)")
    question = _optional_text(record, "input") or ""
    if not question.strip():
        question = TASKS[task].default_question if task else None
        if not question:
            raise RowError("missing 'input' (the question)")
    classes = record.get("all_classes")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        raise RowError(f"'all_classes' must be a list of class names, got {json.dumps(classes)[:60]}")
    # ``all_classes`` are the labels of a classification set (trec: 50 of them), not options to show.
    return Example(
        id=str(record.get("_id") or index),
        question=question,
        context=_text(record, "context"),
        answers=_answers(record["answers"], as_written=True),
        task=task or "qa",
        meta={"dataset": dataset, "length": record.get("length"), "all_classes": classes},
    )


@lru_cache(maxsize=64)
def _warn_once(message: str) -> None:
    log.warning(message)


def _infbench(record: dict, index: int) -> Example:
    """An InfiniteBench (∞Bench) row: ``en.qa`` (``answer`` list) or ``en.mc`` (``options``, answer = option text)."""
    _require(record, "input", "context", "answer")
    choices = _choices(record.get("options"))
    answers = _answers(record["answer"])
    if choices and not all(a in choices or a in option_letters(choices) for a in answers):
        raise RowError(f"answer {answers[0]!r} is not one of the row's options")
    return Example(
        id=str(record.get("id") if record.get("id") is not None else index),
        question=_text(record, "input"),
        context=_text(record, "context"),
        answers=answers,
        choices=choices,
        task="infbench/en.mc" if choices else "infbench/en.qa",
    )


def _with_context_file(record: dict, folder: Path, files: dict[Path, str], *, anywhere: bool) -> dict:
    """``record`` with the text of its ``context_file`` (read once per file) as its ``context``. The file
    must resolve inside the dataset's folder unless ``anywhere``: a dataset is data, often downloaded, and
    must not make a run read (and send to a model server) a file such as ``/etc/shadow``."""
    name = record["context_file"]
    if not isinstance(name, str) or not name.strip():
        raise RowError("'context_file' must be a path (a string), relative to the dataset file")
    if "context" in record:
        raise RowError("a row gives 'context' or 'context_file', not both")
    file = resolved(folder / name)
    if not anywhere and not file.is_relative_to(folder.resolve()):
        raise RowError(f"'context_file' {name!r} is outside the dataset's folder {folder}; move the file there, "
                       "or allow it (`ragfunnel eval --context-files-anywhere`, context_files_anywhere=True)")
    if file not in files:
        files[file] = read_document(file).text
    return {k: v for k, v in record.items() if k != "context_file"} | {"context": files[file]}


def _generic(record: dict, index: int) -> Example:
    _require(record, "question")
    key = next((k for k in ("answers", "answer", "golden_answers") if k in record), None)
    if key is None:
        raise RowError("missing 'answers' (a list of strings) or 'answer' (a string)")
    meta = _meta(record.get("meta"))
    if "hop_answers" in record or "hop_answers" in meta:
        meta = meta | {"hop_answers": _hop_answers(record.get("hop_answers", meta.get("hop_answers")))}
    return Example(
        id=str(record.get("id") or index),
        question=_text(record, "question"),
        context=_optional_text(record, "context"),
        answers=_answers(record[key]),
        choices=_choices(record.get("choices")),
        task=_task(record.get("task", "qa")),
        meta=meta,
    )


FORMATS: dict[str, Callable[[dict, int], Example]] = {
    "hotpotqa": _hotpotqa,
    "musique": _musique,
    "nq-open": _nq_open,
    "longbench": _longbench,
    "infbench": _infbench,
    "jsonl": _generic,
}


def detect_format(record: dict) -> str:
    """Name the question format a record is in, from its fields."""
    if "paragraphs" in record:
        return "musique"
    if "input" in record and "answers" in record:
        return "longbench"
    if "input" in record and "answer" in record:
        return "infbench"
    if "supporting_facts" in record or ("context" in record and "answer" in record
                                        and isinstance(record["context"], list | dict)):
        return "hotpotqa"
    if "answers" in record or "golden_answers" in record or "context" in record or "context_file" in record:
        return "jsonl"
    if isinstance(record.get("answer"), list):
        return "nq-open"
    return "jsonl"


def load_dataset(path: str | Path, *, format: str = "auto", on_error: str = "fail", limit: int | None = None,
                 context_files_anywhere: bool = False) -> Loaded:
    """Read a question set into Examples (see the module docstring for formats). A row's ``context_file``
    is read only from under the dataset's folder unless ``context_files_anywhere``."""
    if format != "auto" and format not in FORMATS:
        raise ConfigError(f"unknown dataset format {format!r}; valid formats: auto, {', '.join(FORMATS)}")
    if on_error not in ("fail", "skip"):
        raise ConfigError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    path, fmt = Path(path), format
    loaded = Loaded(examples=[])
    seen: set[str] = set()
    cleaner = RecordCleaner(path)
    files: dict[Path, str] = {}
    for line, record in _records(path):
        if limit is not None and len(loaded.examples) >= limit:
            break
        record = cleaner.clean(record, line)
        try:
            if isinstance(record, RowError):
                raise record
            if not isinstance(record, dict):
                raise RowError(f"expected a JSON object, got {type(record).__name__}")
            if fmt == "auto":
                fmt = detect_format(record)
                log.info("%s: reading as %s", path, fmt)
            if "context_file" in record:
                record = _with_context_file(record, path.parent, files, anywhere=context_files_anywhere)
            example = FORMATS[fmt](record, line)
            if example.id in seen:
                raise RowError(f"duplicate id {example.id!r}")
        except (RowError, InputError, TypeError, AttributeError, KeyError) as e:
            # The type checks above name the usual mistakes; anything else a row's shape trips is still its fault.
            message = str(e) if isinstance(e, RowError | InputError) else f"not a {fmt} row ({type(e).__name__}: {e})"
            bad = BadRow(str(path), line, message)
            if on_error == "fail":
                raise InputError(f"{bad}; fix the row, or skip bad rows (set {option('on_error')} to skip)") from None
            log.warning("skipping %s", bad)
            loaded.errors.append(bad)
            continue
        seen.add(example.id)
        loaded.examples.append(example)
    cleaner.done()
    return loaded
