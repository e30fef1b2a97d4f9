"""Configurations θ = (k, m, n), token budgets and a resumable grid runner (summarised in :mod:`.summary`).

A configuration names a strategy and its knobs: ``documents`` k retrieved per question,
``shots`` m demonstrations, ``iterations`` n (IterDRAG's most retrieve-and-answer steps; 1 for
the one-call strategies). Zero-shot QA, RAG and DRAG are one method (DRAG) at different θ, so
each θ has exactly one name: ``zero-shot`` is k=0, m=0; ``rag`` is k≥1, m=0; ``drag`` is m≥1.

A grid run directory is an ``ragfunnel eval`` one (:mod:`ragfunnel.journal`) with the same
guarantees: one row per (example, configuration) stored as soon as it is done, failed pairs kept
apart and retried on resume, one writer at a time, a different run configuration refused.

Budgets are compared with the *mean* effective context length of a configuration (LLM input
tokens summed over all calls of one answer). The paper's Eq. 1 bounds every example; the mean
keeps a configuration whose answers vary a little in length from dropping out of a budget
because of one long question.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

from ragfunnel.errors import BackendUnavailable, ConfigError, InputError, RagfunnelError
from ragfunnel.eval.runner import score
from ragfunnel.journal import RunDir, RunState, drain, load_run
from ragfunnel.llm.registry import reset_loaded
from ragfunnel.ray_cluster import RayOptions, ray_drain
from ragfunnel.types import Example, Prediction

log = logging.getLogger(__name__)

STRATEGIES = ("zero-shot", "rag", "drag", "iterdrag")
METRICS = ("accuracy", "em", "f1")
# The paper's grid (Section 4.1): k up to 1000, m = 0 and 2^0 .. 2^8, n up to 5.
DEFAULT_DOCUMENTS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
DEFAULT_SHOTS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_ITERATIONS = (1, 2, 3, 4, 5)


def _one_call_strategy(documents: int, shots: int) -> str:
    if shots > 0:
        return "drag"
    return "rag" if documents > 0 else "zero-shot"


@dataclass(frozen=True)
class Config:
    """One point θ = (k, m, n) of a strategy."""

    strategy: str
    documents: int
    shots: int
    iterations: int = 1

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown strategy {self.strategy!r}; valid strategies: {', '.join(STRATEGIES)}")
        if self.documents < 0 or self.shots < 0 or self.iterations < 1:
            raise ConfigError(f"{self.label}: documents and shots must be >= 0 and iterations >= 1")
        if self.strategy == "iterdrag":
            return
        if self.iterations != 1:
            raise ConfigError(f"{self.label}: {self.strategy} answers in one call, so iterations must be 1; "
                              "use strategy 'iterdrag' for more")
        named = _one_call_strategy(self.documents, self.shots)
        if named != self.strategy:
            raise ConfigError(f"{self.label} is named {named!r}: zero-shot has k=0 and m=0, rag has k>=1 and m=0, "
                              "drag has m>=1")

    @classmethod
    def for_theta(cls, method: str, documents: int, shots: int, iterations: int = 1) -> Config:
        """The configuration of ``method`` ("drag" or "iterdrag") at θ, under its one valid name."""
        if method not in ("drag", "iterdrag"):
            raise ConfigError(f"unknown method {method!r}; valid methods: drag, iterdrag")
        strategy = "iterdrag" if method == "iterdrag" else _one_call_strategy(documents, shots)
        return cls(strategy, documents, shots, iterations)

    @property
    def method(self) -> str:
        """The class that runs it: zero-shot, RAG and DRAG are all DRAG."""
        return "iterdrag" if self.strategy == "iterdrag" else "drag"

    @property
    def theta(self) -> tuple[int, int, int]:
        return (self.documents, self.shots, self.iterations)

    @property
    def label(self) -> str:
        return f"{self.strategy} k={self.documents} m={self.shots} n={self.iterations}"


def default_grid(
    strategies: Sequence[str] = STRATEGIES,
    *,
    documents: Sequence[int] = DEFAULT_DOCUMENTS,
    shots: Sequence[int] = DEFAULT_SHOTS,
    iterations: Sequence[int] = DEFAULT_ITERATIONS,
) -> list[Config]:
    """Every configuration of ``strategies`` over the given k, m and n (each θ once, cheapest knobs first)."""
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ConfigError(f"unknown strategy {', '.join(map(repr, unknown))}; "
                          f"valid strategies: {', '.join(STRATEGIES)}")
    out = []
    for k in sorted(set(documents)):
        for m in sorted(set(shots)):
            one_call = _one_call_strategy(k, m)
            if one_call in strategies:
                out.append(Config(one_call, k, m))
            if "iterdrag" in strategies:
                out.extend(Config("iterdrag", k, m, n) for n in sorted(set(iterations)))
    return out


_BUDGET = re.compile(r"(\d+(?:\.\d+)?)([km]?)")
_UNITS = {"": 1, "k": 1_000, "m": 1_000_000}


def parse_budget(text: str) -> int:
    """Tokens in ``"16k"``, ``"1.5k"``, ``"1m"`` or ``"16000"`` (k = 1,000 and m = 1,000,000 tokens)."""
    match = _BUDGET.fullmatch(text.strip().lower())
    tokens = round(float(match.group(1)) * _UNITS[match.group(2)]) if match else 0
    if tokens < 1:
        raise ConfigError(f"bad token budget {text!r}; write a positive token count like 16k, 1.5k, 1m or 16000")
    return tokens


def parse_budgets(text: str) -> list[int]:
    """``"2k,4k,16k"`` -> ``[2000, 4000, 16000]`` (sorted, each once)."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"no token budgets in {text!r}; write them like 2k,4k,16k")
    return sorted({parse_budget(p) for p in parts})


def format_tokens(tokens: float) -> str:
    """16000 -> "16k", 1500 -> "1.5k", 1000000 -> "1m", 950 -> "950"."""
    for unit, size in (("m", 1_000_000), ("k", 1_000)):
        if tokens >= size:
            return f"{tokens / size:.3g}{unit}"
    return f"{tokens:.0f}"


def within_budget(configs: Iterable[Config], budget: int, estimate: Callable[[Config], int]) -> list[Config]:
    """The configurations whose estimated tokens fit ``budget``.

    ``estimate`` says what the budget bounds: the largest single call when choosing what a grid may
    run (no call exceeds L_max), the effective context length when planning.
    """
    configs = list(configs)
    if not configs:
        raise ConfigError("no configurations to choose from; give at least one strategy and its k, m, n values")
    costs = {c: estimate(c) for c in configs}
    fitting = [c for c in configs if costs[c] <= budget]
    if not fitting:
        cheapest = min(configs, key=costs.__getitem__)
        raise ConfigError(f"a budget of {budget} tokens is smaller than any configuration; the smallest that fits "
                          f"is {costs[cheapest]} tokens ({cheapest.label})")
    return fitting


class Answerer(Protocol):
    def run(self, question: str) -> Prediction: ...


@dataclass(frozen=True)
class GridRow:
    """One (example, configuration) result as stored in a grid run directory; ``error`` set on failure."""

    example_id: str
    config: Config
    metrics: dict[str, float]
    effective_tokens: int
    max_call_tokens: int
    seconds: float
    error: str | None = None
    answer: str = ""
    references: list[str] = field(default_factory=list)
    trace: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, Config]:
        return (self.example_id, self.config)

    def to_json(self) -> dict[str, Any]:
        knobs = {"example_id": self.example_id, "strategy": self.config.strategy, "documents": self.config.documents,
                 "shots": self.config.shots, "iterations": self.config.iterations}
        if self.error is not None:
            return {**knobs, "error": self.error, "metrics": {}, "seconds": self.seconds}
        return {**knobs, "answer": self.answer, "references": self.references, "metrics": self.metrics,
                "effective_tokens": self.effective_tokens, "max_call_tokens": self.max_call_tokens,
                "seconds": self.seconds, "trace": self.trace}

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> GridRow:
        try:
            config = Config(row["strategy"], row["documents"], row["shots"], row["iterations"])
            values = (row["example_id"], row["metrics"], row.get("effective_tokens", 0), row.get("max_call_tokens", 0),
                      row["seconds"])
        except KeyError as e:
            raise InputError(f"the row has no {e.args[0]!r}: it is not a grid row; "
                             "pass a run directory written by `ragfunnel scale grid`") from None
        except (ConfigError, TypeError) as e:
            raise InputError(f"the row's configuration is not valid ({e})") from None
        kinds = (str, dict, int, int, int | float)
        if not all(isinstance(v, k) and not isinstance(v, bool) for v, k in zip(values, kinds, strict=True)) or \
                not all(isinstance(m, int | float) for m in values[1].values()):
            raise InputError("a field has the wrong type (example_id text, metrics numbers, tokens and seconds "
                             "numbers): it is not a grid row")
        error = row.get("error")
        return cls(values[0], config, *values[1:], error=None if error is None else str(error),
                   answer=str(row.get("answer", "")), references=list(row.get("references") or []),
                   trace=row.get("trace") or {})


def load_grid(run_dir: str | Path) -> RunState[GridRow]:
    """A grid run directory as it stands, read without modifying it (safe beside a live run)."""
    return load_run(Path(run_dir), GridRow.from_json, command="ragfunnel scale grid")


def _row(example: Example, config: Config, answer: Callable[[], Prediction]) -> GridRow:
    started = time.perf_counter()
    try:
        p = answer()
    except BackendUnavailable:  # not this pair's fault: the run stops, and the pair runs again on resume
        raise
    except RagfunnelError as e:  # kept apart as a failure (scored 0 in the summaries) and retried on resume
        return GridRow(example.id, config, {}, 0, 0, round(time.perf_counter() - started, 3), error=str(e))
    return GridRow(
        example.id, config, score(example, p.answer),
        effective_tokens=p.trace.input_tokens,
        # Each stage is one LLM call for DRAG/IterDRAG, so the largest stage is the largest call.
        max_call_tokens=max((s.input_tokens for s in p.trace.stages), default=0),
        seconds=round(time.perf_counter() - started, 3),
        answer=p.answer, references=list(example.answers), trace=p.to_dict()["trace"],
    )


@dataclass(frozen=True)
class GridResult:
    rows: list[GridRow]  # every pair once: its finished row, else its latest failure
    written: int  # rows added by this call (the rest were already in the directory)


class GridPairs:
    """Answers one (configuration, example) pair into its row; picklable when ``make_method`` is, so Ray
    workers can run it too. Each process builds a configuration's method once, inside its first pair, so
    a configuration that cannot be built fails its rows."""

    def __init__(self, make_method: Callable[[Config], Answerer], *, cold_caches: bool):
        self.make_method = make_method
        self.cold_caches = cold_caches
        self._methods: dict[Config, Answerer] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"make_method": self.make_method, "cold_caches": self.cold_caches, "_methods": {}}

    def __call__(self, pair: tuple[Config, Example]) -> GridRow:
        config, example = pair
        if self.cold_caches:
            reset_loaded()
        return _row(example, config, partial(self._answer, config, example))

    def failed(self, pair: tuple[Config, Example], message: str) -> GridRow:
        config, example = pair
        return GridRow(example.id, config, {}, 0, 0, 0.0, error=message)

    def _answer(self, config: Config, example: Example) -> Prediction:
        if config not in self._methods:
            self._methods[config] = self.make_method(config)
        return self._methods[config].run(example.question)


def run_grid(
    examples: Iterable[Example],
    configs: Iterable[Config],
    make_method: Callable[[Config], Answerer],
    run_dir: str | Path,
    *,
    config_meta: dict[str, Any],
    progress: bool = True,
    cold_caches: bool = True,
    retry_failed: bool = True,
    ray: RayOptions | None = None,
) -> GridResult:
    """Answer every example under every configuration, storing a row per pair in ``run_dir``.

    Configurations run one after another in the order given (put the cheap ones first), so a run
    stopped early leaves whole configurations behind. ``config_meta`` identifies the run (dataset,
    index, model ...); resuming needs the same one, and retries the pairs that failed unless
    ``retry_failed`` is False. Every pair starts with cold prompt caches so
    its seconds do not depend on what ran before. With ``cold_caches=False`` the models keep their
    prompt caches between answers instead: prompts that share a prefix with the previous one (DRAG's
    demonstrations come first and are the same for every question) prefill only the rest (DRAG k=20
    m=2 on two cores: 73.5 s for the cold first answer, 27-46 s for the warm ones at 7-8k tokens).
    Effective context length counts every input token either way; seconds then depend on what ran before.
    ``ray`` runs the pairs on Ray actors (``make_method`` must then be picklable, e.g.
    :class:`~ragfunnel.scaling.sizing.GridMethods`); this process still writes every row.
    """
    examples, configs = list(examples), list(dict.fromkeys(configs))
    job = GridPairs(make_method, cold_caches=cold_caches)
    with RunDir(run_dir, config_meta, GridRow.from_json, command="ragfunnel scale grid") as run:
        todo = run.todo([((e.id, c), (c, e)) for c in configs for e in examples], retry_failed=retry_failed)
        with tqdm(total=len(todo), desc=f"grid {run.path.name}", unit="answer",
                  disable=None if progress else True) as bar:
            def advance(row: GridRow) -> None:
                bar.set_postfix_str(row.config.label, refresh=False)
                bar.update()

            if ray is None:
                drain(todo, job, run.record, on_row=advance)
            else:
                ray_drain(todo, job, run.record, options=ray, on_row=advance)
        return GridResult(rows=run.state.rows, written=len(todo))
