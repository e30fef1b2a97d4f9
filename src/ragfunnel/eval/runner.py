"""Resumable evaluation runs: one JSONL row per (example, method), written as soon as it is done.

A run directory (see :mod:`ragfunnel.journal`) holds ``config.json`` (what the run is),
``rows.jsonl`` (finished pairs) and ``failed.jsonl`` (pairs whose method raised). Re-running the
same configuration skips the finished pairs and retries the failed ones; a different configuration
is refused; a second process writing the same directory is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ragfunnel.confidence import abstained, measuring_every_signal
from ragfunnel.errors import BackendUnavailable, ConfigError, InputError, RagfunnelError, option
from ragfunnel.eval.failures import FAILURE_KINDS, FailureKind, failure_of
from ragfunnel.eval.official_metrics import hotpotqa_scores, longbench_score
from ragfunnel.journal import RunDir, RunState, drain, load_run
from ragfunnel.llm.registry import reset_loaded
from ragfunnel.metrics import (
    answer_rank,
    best_over_references,
    choice_accuracy,
    contains_answer,
    evidence_read,
    exact_match,
    gold_rank,
    gold_recall,
    rouge_l,
    token_f1,
)
from ragfunnel.prompts import task_kind
from ragfunnel.ray_cluster import RayOptions, ray_drain
from ragfunnel.text.chunking import count_words
from ragfunnel.types import Chunk, Example, Prediction

log = logging.getLogger(__name__)


METRIC_PROFILES = ("ragfunnel", "longbench", "hotpotqa")


def score(example: Example, answer: str, profile: str = "ragfunnel") -> dict[str, float]:
    """The metrics of one answer, each the best over the example's references.

    ``ragfunnel`` scores by the task's kind (qa: F1, EM, contains-answer; summary: ROUGE-L; choice:
    accuracy); ``longbench`` gives LongBench's own score for the row's dataset as ``longbench``
    (exactly its metrics.py); ``hotpotqa`` gives the official HotpotQA F1 and EM (yes/no answers
    that disagree score 0).
    """
    refs = example.answers
    if profile == "longbench":
        dataset = example.meta.get("dataset")
        if not dataset:
            raise ConfigError(f"example {example.id!r} names no LongBench dataset, which the longbench metric profile "
                              f"({option('metric_profile')}) needs; read LongBench rows (with their 'dataset' field) "
                              "or use another profile")
        return {"longbench": longbench_score(dataset, answer, refs, example.meta.get("all_classes"))}
    if profile == "hotpotqa":
        return hotpotqa_scores(answer, refs)
    if profile != "ragfunnel":
        raise ConfigError(f"unknown metric profile {profile!r}; valid profiles: {', '.join(METRIC_PROFILES)}")
    kind = task_kind(example.task)
    if kind == "summary":
        return {"rouge_l": best_over_references(rouge_l, answer, refs)}
    if kind == "choice":
        return {"accuracy": max((choice_accuracy(answer, r, example.choices or []) for r in refs), default=0.0)}
    return {
        "f1": best_over_references(token_f1, answer, refs),
        "em": best_over_references(exact_match, answer, refs),
        "accuracy": best_over_references(contains_answer, answer, refs),
    }


@dataclass(frozen=True)
class EvalRow:
    """One (example, method) result as stored in a run directory; ``error`` set when the method failed."""

    example_id: str
    method: str
    metrics: dict[str, float]
    question: str = ""
    answer: str = ""
    references: list[str] = field(default_factory=list)
    trace: dict[str, Any] = field(default_factory=dict)  # Trace.to_dict(): seconds, input_tokens, stages
    chunks_used: list[dict[str, Any]] = field(default_factory=list)  # {"position", "score"}
    samples: list[str] = field(default_factory=list)
    # Where the method's scores put the best chunk holding a reference answer (short-answer tasks).
    answer_rank: int | None = None
    n_chunks: int = 0
    ranking: list[int] = field(default_factory=list)
    # Rank of the first chunk overlapping a supporting passage and the share of them the final context
    # touched; both None when the example's supporting passages are not known.
    gold_rank: int | None = None
    gold_recall: float | None = None
    # Whether the final context held the evidence: a chunk read holds a reference answer, or every supporting
    # passage was touched (metrics.evidence_read); None when that cannot be told (not a short-answer task, or
    # no reference answer in the document word for word and no supporting passages known; older rows).
    evidence_read: bool | None = None
    # The estimated probability that the answer is right, and the signals it was computed from
    # (ragfunnel.confidence); None and empty for methods that give none.
    confidence: float | None = None
    signals: dict[str, float] = field(default_factory=dict)
    # Whether the confidence reached the calibration's ``supported_at`` (Prediction.supported); None without a
    # confidence, and on rows written before it was recorded.
    supported: bool | None = None
    abstained: bool = False  # the answer was withheld for low confidence (``--abstain``)
    # What went wrong with a wrong answer (ragfunnel.eval.failures: earlier_hop, wrong_option, ...); None when
    # the answer is right, the task has no right or wrong (summaries), or the row was written before it was.
    failure: FailureKind | None = None
    error: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.example_id, self.method)

    @property
    def seconds(self) -> float:
        return float(self.trace.get("seconds", 0.0))

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"example_id": self.example_id, "method": self.method, "question": self.question,
                    "error": self.error, "metrics": {}}
        row = {k: v for k, v in asdict(self).items() if k not in ("error", "gold_rank", "gold_recall")}
        if self.gold_recall is not None:
            row |= {"gold_rank": self.gold_rank, "gold_recall": self.gold_recall}
        return row

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> EvalRow:
        """The row ``to_json`` wrote; a row of another shape is an InputError naming the field."""
        _expect(row, "example_id", str)
        _expect(row, "method", str)
        if row.get("error") is not None:
            return cls(row["example_id"], row["method"], {}, question=str(row.get("question", "")),
                       error=str(row["error"]))
        metrics = _expect(row, "metrics", dict)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in metrics.values()):
            raise InputError("'metrics' must map names to numbers")
        trace = _expect(row, "trace", dict)
        _expect(trace, "seconds", int | float, where="trace")
        _expect(trace, "input_tokens", int, where="trace")
        for stage in _expect(trace, "stages", list, where="trace"):
            if not isinstance(stage, dict):
                raise InputError("'trace.stages' must hold objects")
            _expect(stage, "name", str, where="trace stage")
            _expect(stage, "seconds", int | float, where="trace stage")
        if row.get("confidence") is not None:
            _expect(row, "confidence", int | float)
        for flag in ("evidence_read", "supported"):
            if row.get(flag) is not None and not isinstance(row[flag], bool):
                raise InputError(f"'{flag}' must be true, false or null")
        if row.get("failure") is not None and row["failure"] not in FAILURE_KINDS:
            raise InputError(f"'failure' must be null or one of {', '.join(FAILURE_KINDS)}, got {row['failure']!r}")
        signals = row.get("signals", {})
        if not isinstance(signals, dict) or not all(isinstance(v, int | float) for v in signals.values()):
            raise InputError("'signals' must map names to numbers")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in row.items() if k in known})


def _expect(row: dict[str, Any], name: str, kind: Any, *, where: str = "row") -> Any:
    if name not in row:
        raise InputError(f"the {where} has no {name!r}; it is not a row of `ragfunnel eval`")
    if not isinstance(row[name], kind) or isinstance(row[name], bool):
        raise InputError(f"{where} field {name!r} is a {type(row[name]).__name__}, not the expected type")
    return row[name]


def _row(example: Example, method: str, run: Callable[[], Prediction], profile: str) -> EvalRow:
    try:
        p = run()
    except BackendUnavailable:  # not this pair's fault: the run stops, and the pair runs again on resume
        raise
    except RagfunnelError as e:  # kept apart as a failure and retried on resume, never silently dropped
        return EvalRow(example.id, method, {}, question=example.question, error=str(e))
    gold = _gold(example, p)
    metrics = score(example, p.answer, profile)
    return EvalRow(
        example_id=example.id,
        method=method,
        metrics=metrics,
        question=example.question,
        answer=p.answer,
        references=list(example.answers),
        trace=p.to_dict()["trace"],
        chunks_used=[{"position": sc.chunk.position, "score": sc.score} for sc in p.chunks_used],
        samples=[s.text for s in p.samples],
        answer_rank=_answer_rank(example, p),
        n_chunks=len(p.ranking),
        ranking=[sc.chunk.position for sc in p.ranking],
        gold_rank=gold.get("gold_rank"),
        gold_recall=gold.get("gold_recall"),
        evidence_read=_evidence_read(example, p, gold.get("gold_recall")),
        confidence=p.confidence,
        signals=dict(p.signals),
        supported=p.supported,
        abstained=abstained(p),
        failure=failure_of(example, p.answer, metrics),
    )


def _answer_rank(example: Example, p: Prediction) -> int | None:
    if task_kind(example.task) != "qa" or not p.ranking:
        return None
    return answer_rank([sc.chunk.text for sc in p.ranking], example.answers)


def _evidence_read(example: Example, p: Prediction, gold_recall: float | None) -> bool | None:
    """Whether the chunks the method read held the evidence (see :func:`ragfunnel.metrics.evidence_read`).

    A method that ranked no chunks read its context whole (LC, or a context within the budget): the
    document is then that context, so it read the evidence exactly when the context holds an answer.
    """
    if task_kind(example.task) != "qa":
        return None
    document = [sc.chunk.text for sc in p.ranking] or [example.context or ""]
    return evidence_read([sc.chunk.text for sc in p.chunks_used], document, example.answers, gold_recall)


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
    rows: list[EvalRow]  # every pair once: its finished row, else its latest failure
    written: int  # rows added by this call (the rest were already in the directory)


def load_eval(run_dir: str | Path) -> RunState[EvalRow]:
    """A run directory of ``ragfunnel eval`` as it stands, read without modifying it."""
    return load_run(Path(run_dir), EvalRow.from_json, command="ragfunnel eval")


@dataclass(frozen=True)
class EvalPairs:
    """Runs one (example, method) pair into its row; picklable, so Ray workers can run it too."""

    methods: dict[str, Any]
    profile: str
    cold: bool  # every pair starts with cold prompt caches (see :func:`reset_loaded`)

    def __call__(self, pair: tuple[Example, str]) -> EvalRow:
        example, name = pair
        if self.cold:  # so latencies do not depend on the order methods ran in
            reset_loaded()
        with measuring_every_signal():  # rows carry every signal, so `calibrate` can weigh them all
            return _row(example, name, lambda: self.methods[name].run(example.question, example.context or "",
                                                                       choices=example.choices), self.profile)

    def failed(self, pair: tuple[Example, str], message: str) -> EvalRow:
        example, name = pair
        return EvalRow(example.id, name, {}, question=example.question, error=message)


def run_eval(
    examples: Iterable[Example],
    methods: dict[str, Any],
    run_dir: str | Path,
    *,
    config: dict[str, Any],
    workers: int = 1,
    ray: RayOptions | None = None,
    retry_failed: bool = True,
    metric_profile: str = "ragfunnel",
    progress: bool = True,
) -> RunResult:
    """Run every method on every example, storing a row per pair in ``run_dir`` as soon as it is done.

    ``methods`` maps a name to an object with ``run(question, context, choices=...)``.
    ``config`` identifies the run; resuming needs the same one. Pairs that failed before run again
    unless ``retry_failed`` is False. ``metric_profile`` picks the scoring (see :func:`score`).
    ``workers`` > 1 runs pairs concurrently (useful with server
    backends; in-process models serialise anyway). With one worker, every pair starts with cold
    prompt caches (see :func:`reset_loaded`). ``ray`` runs the pairs on Ray actors instead, one pair
    at a time each, cold as with one worker; this process still writes every row (the methods must
    be picklable: those :func:`~ragfunnel.methods.make_method` builds from spec strings are).
    A backend that cannot be reached stops the run
    (:class:`BackendUnavailable`) and Ctrl-C stops it (:class:`Interrupted`); finished rows stay.
    """
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    examples = list(examples)
    for e in examples:  # a profile that cannot score the examples stops here, before any model runs
        score(e, "", metric_profile)
    # The profile is part of what the run is: rows scored two ways never mix. Runs made before it was
    # recorded were scored with the default.
    config = config | {"metric_profile": metric_profile}
    with RunDir(run_dir, config, EvalRow.from_json, command="ragfunnel eval",
                implied={"metric_profile": "ragfunnel"}) as run:
        todo = run.todo([((e.id, name), (e, name)) for e in examples for name in methods], retry_failed=retry_failed)
        job = EvalPairs(methods, metric_profile, cold=workers == 1 or ray is not None)
        with tqdm(total=len(todo), desc=f"eval {run.path.name}", unit="row", disable=not progress) as bar:
            if ray is None:
                drain(todo, job, run.record, workers=workers, on_row=lambda row: bar.update())
            else:
                ray_drain(todo, job, run.record, options=ray, on_row=lambda row: bar.update())
        return RunResult(rows=run.state.rows, written=len(todo))
