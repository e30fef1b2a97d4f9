"""Resumable evaluation runs: one JSONL row per (example, method), written as soon as it is done.

A run directory holds ``config.json`` (what the run is) and ``rows.jsonl``. Re-running the same
configuration skips the pairs already written; a different configuration is refused. A process
killed mid-write leaves at most one partial last line, which the next run cuts off before it
appends, so a resume never stops on a broken line and never duplicates a row.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tqdm.auto import tqdm

from ragfunnel.errors import ConfigError, RagfunnelError
from ragfunnel.eval.metrics import (
    answer_rank,
    best_over_references,
    choice_accuracy,
    contains_answer,
    exact_match,
    gold_rank,
    gold_recall,
    rouge_l,
    token_f1,
)
from ragfunnel.llm.registry import reset_loaded
from ragfunnel.text.chunking import count_words
from ragfunnel.types import Chunk, Example, Prediction

log = logging.getLogger(__name__)

CONFIG_FILE, ROWS_FILE = "config.json", "rows.jsonl"


def score(example: Example, answer: str) -> dict[str, float]:
    """The task's metrics for one answer, each the best over the example's references."""
    refs = example.answers
    if example.task == "summary":
        return {"rouge_l": best_over_references(rouge_l, answer, refs)}
    if example.task == "choice":
        return {"accuracy": max((choice_accuracy(answer, r, example.choices) for r in refs), default=0.0)}
    return {
        "f1": best_over_references(token_f1, answer, refs),
        "em": best_over_references(exact_match, answer, refs),
        "accuracy": best_over_references(contains_answer, answer, refs),
    }


def read_rows(path: Path, *, repair: bool = True) -> list[dict]:
    """Complete rows of ``rows.jsonl``; a torn last line (killed mid-write) is cut off the file.

    ``repair=False`` only reads: a report over a run still being written must not cut the row in flight.
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1  # everything after the last newline is a partial write
    if keep < len(data) and repair:
        log.warning("%s ends in a partial row (the run was killed mid-write); dropping it", path)
        with path.open("r+b") as f:
            f.truncate(keep)
    rows = []
    for number, line in enumerate(data[:keep].splitlines(), start=1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            raise ConfigError(f"{path}:{number} is not a JSON row; the run directory is damaged — "
                              "start fresh with a new --out") from None
    return rows


def check_config(run_dir: Path, config: dict[str, Any]) -> None:
    """Record ``config`` in a new run directory, or refuse one that holds a different run."""
    path = run_dir / CONFIG_FILE
    if path.exists():
        old = json.loads(path.read_text())
        if old != config:
            differ = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            raise ConfigError(
                f"{run_dir} holds a run with a different configuration (differs in: {', '.join(differ)}); "
                "pass a new --out directory to start fresh, or repeat the original options to resume"
            )
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")  # a kill mid-write must not leave a half-written config behind
        partial.write_text(json.dumps(config, indent=2, sort_keys=True))
        os.replace(partial, path)


def append_row(out: IO[str], row: dict[str, Any]) -> None:
    """Append one JSONL row durably: a kill can tear only the line in flight, never an earlier one."""
    out.write(json.dumps(row, ensure_ascii=False) + "\n")
    out.flush()
    os.fsync(out.fileno())


def _row(example: Example, method: str, run: Callable[[], Prediction]) -> dict[str, Any]:
    try:
        p = run()
    except RagfunnelError as e:  # counted as a failure in the report, never silently dropped
        return {"example_id": example.id, "method": method, "error": str(e), "metrics": {}}
    return {
        "example_id": example.id,
        "method": method,
        "answer": p.answer,
        "references": example.answers,
        "metrics": score(example, p.answer),
        "trace": p.to_dict()["trace"],
        "chunks_used": [{"position": sc.chunk.position, "score": sc.score} for sc in p.chunks_used],
        "samples": [s.text for s in p.samples],
        # Where the method's scores put the best chunk holding a reference answer (short-answer tasks).
        "answer_rank": _answer_rank(example, p),
        "n_chunks": len(p.ranking),
        "ranking": [sc.chunk.position for sc in p.ranking],
        **_gold(example, p),
    }


def _answer_rank(example: Example, p: Prediction) -> int | None:
    if example.task not in ("qa", "multihop") or not p.ranking:
        return None
    return answer_rank([sc.chunk.text for sc in p.ranking], example.answers)


def gold_word_spans(example: Example) -> list[tuple[int, int]] | None:
    """Word spans of the example's supporting passages in its context; None when they are not known.

    Supporting passages are those titled in ``meta["supporting_titles"]`` (HotpotQA, MuSiQue), else
    ``meta["gold_passages"]`` (a long context built around the question's own passages). The context
    must be its passages joined, as the loaders and the long-context builder write it.
    """
    if not example.passages or not example.context:
        return None
    titles = set(example.meta.get("supporting_titles") or ())
    gold = ([i for i, d in enumerate(example.passages) if d.title in titles] if titles
            else list(example.meta.get("gold_passages") or ()))
    spans, start = [], 0
    for d in example.passages:
        n = count_words(d.render())
        spans.append((start, start + n))
        start += n
    if not gold or start != count_words(example.context):
        return None
    return [spans[i] for i in gold]


def _chunk_spans(chunks: list[Chunk], window: int) -> list[tuple[int, int]]:
    return [(c.position * window, c.position * window + c.n_words) for c in chunks]


def _gold(example: Example, p: Prediction) -> dict[str, Any]:
    """The rank of the best chunk overlapping a supporting passage, and the share of supporting
    passages the final context touched; empty when the example has no known supporting passages."""
    gold = gold_word_spans(example)
    if gold is None or not p.ranking:
        return {}
    window = max(sc.chunk.n_words for sc in p.ranking)  # every chunk but the last has the full window
    return {"gold_rank": gold_rank(_chunk_spans([sc.chunk for sc in p.ranking], window), gold),
            "gold_recall": gold_recall(_chunk_spans([sc.chunk for sc in p.chunks_used], window), gold)}


@dataclass
class RunResult:
    rows: list[dict]
    written: int  # rows added by this call (the rest were already in the directory)


def run_eval(
    examples: Iterable[Example],
    methods: dict[str, Any],
    run_dir: str | Path,
    *,
    config: dict[str, Any],
    workers: int = 1,
    progress: bool = True,
) -> RunResult:
    """Run every method on every example, appending a row per pair to ``run_dir/rows.jsonl``.

    ``methods`` maps a name to an object with ``run(question, context, choices=...)``.
    ``config`` identifies the run; resuming needs the same one. ``workers`` > 1 runs pairs
    concurrently (useful with server backends; in-process models serialise anyway). With one
    worker, every pair starts with cold prompt caches (see :func:`reset_loaded`).
    """
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    run_dir = Path(run_dir)
    check_config(run_dir, config)
    rows_path = run_dir / ROWS_FILE
    rows = read_rows(rows_path)
    done = {(r["example_id"], r["method"]) for r in rows}
    todo = [(e, name) for e in examples for name in methods if (e.id, name) not in done]
    if done:
        log.info("resuming %s: %d rows done, %d to go", run_dir, len(done), len(todo))

    def job(pair: tuple[Example, str]) -> dict[str, Any]:
        example, name = pair
        if workers == 1:  # cold start per pair, so latencies do not depend on the order methods ran in
            reset_loaded()
        return _row(example, name, lambda: methods[name].run(example.question, example.context or "",
                                                              choices=example.choices))

    written = 0
    with rows_path.open("a", encoding="utf-8") as out, ThreadPoolExecutor(max_workers=workers) as pool, \
            tqdm(total=len(todo), desc=f"eval {run_dir.name}", unit="row", disable=not progress) as bar:
        # Rows go out as they finish, so with several workers a slow pair holds back no finished one.
        for done_pair in as_completed([pool.submit(job, pair) for pair in todo]):
            row = done_pair.result()
            append_row(out, row)
            rows.append(row)
            written += 1
            bar.update()
    return RunResult(rows=rows, written=written)
