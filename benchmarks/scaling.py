"""Inference scaling for corpus RAG on the shared multi-hop questions (the paper's Table 1 and Section 5 analog).

For each dataset (MuSiQue and HotpotQA train questions, each with its pooled corpus in a
``ragfunnel.corpus.index`` index, BM25 over documents) the script runs zero-shot QA, RAG, DRAG and
IterDRAG over a grid of θ = (k documents, m demonstrations, n iterations) with the library's grid
runner and method classes, then reports:

1. the optimal-performance table per dataset: per budget L_max and strategy, the best configuration
   whose mean effective context length (LLM input tokens summed over an answer's calls) fits it;
2. the computation allocation model σ⁻¹(P) ≈ (a + b⊙i)ᵀ log(θ + ε) + c, fitted on the *fit* questions of
   every dataset together (a, b, c shared; i per dataset and method), with its R² there and on the
   held-back questions;
3. the planner: per dataset and budget, the θ the fitted model predicts best (i and token costs from
   the fit questions), scored on the *held-back* questions against the best θ found there, and against
   the θ that simply did best on the fit questions.

Questions (per dataset, in file order): the first ``--questions`` are the grid's, the last ``--held-back``
of them (default a third) never reach the fit; demonstrations come from the last ``--train`` questions
of the file, so they never meet the grid's. DRAG demonstrations are those training questions with their
gold answers and retrieved documents (``make_drag_demonstrations``). IterDRAG demonstrations are self-ask
chains written by ``--demo-model`` on them, kept only when the final answer is right
(``generate_iterdrag_demonstrations``), tried in order until the largest m in the grid is covered or
``--demo-tries`` questions are spent; IterDRAG configurations needing more chains than were kept are left
out (and said so). The demonstration model is the 1.5B, not the answering 0.5B: the 0.5B, asked with no
demonstrations, answered at once and never wrote a follow-up on 6 of 6 HotpotQA training questions, so
none of its chains could be kept. Indexes and both demonstration files are cached under ``--work``
(benchmarks/out/, gitignored) and reused by later runs.

Which configurations run: of every θ in ``--documents`` x ``--shots`` (x ``--iterations`` for IterDRAG),
those whose worst-case effective context length fits the largest budget: the first call's tokens
(measured by the library's prompt probe on three grid questions) for one-call strategies, (2n + 1) times
the first call for IterDRAG (at most n follow-ups, each followed by its answer, then the final answer;
the context only grows). Of those, the base configurations (k=0,m=0; k=1,m=0; k=0,m=1 at n=1, which i
comes from) and, per budget band (previous budget, budget] and strategy, the ``--per-budget`` dearest
(the ones that use the band most fully; ``all`` keeps everything). They run cheapest first and budget by
budget over all datasets (every configuration within 1k on each dataset, then within 2k, ...), so a run
stopped early leaves whole tables for the smaller budgets.

Prompt caches are kept between answers (``run_grid(cold_caches=False)``; ``--cold-caches`` drops them):
a configuration's questions run back to back and DRAG's demonstrations, the same for every question, come
first in the prompt, so llama.cpp prefills them once per configuration instead of once per answer.
Effective context length still counts every input token; the rows' seconds are then not cold-start times
(rows written before 2026-11-23 06:00, budgets up to 4k, ran with cold caches).

Resumable: rows go to ``OUT/<dataset>/rows.jsonl`` as each answer finishes (the grid runner's format,
one per question and configuration) and a re-run skips what is there; more questions, budgets or grid
values only add rows. ``OUT`` also gets ``scaling.json`` (date, machine, command, settings, tables, fit,
R², planner comparison), ``scaling.md``, ``allocation.json``, ``predicted_vs_actual.png`` and
``<dataset>/quality_vs_context.png``. ``--dry-run`` lists the configurations with their first-call and
worst-case tokens and stops. A fit that the grid cannot support is reported (with the reason) in both
files, and the tables are written all the same.

Answering model: ``bundled:qwen2.5-0.5b``. The grid's cost is prefill, and on two cores the 0.5B
prefills about 1.7x faster than the 1.5B (DESIGN.md); a grid up to 16k tokens on two datasets fits in
a few hours only with the smaller model. Its quality is low and it is not the paper's Gemini 1.5 Flash:
the point is where the trends hold and where they do not, not the paper's numbers.

Measured cost per answer (2 cores, llama-cpp-python, n_threads=2, 0.5B, HotpotQA questions). Idle
machine (load average 0.4-2):

    DRAG k=5 m=2, 1.9k / 2.3k tokens                  12 / 14 s    (~170 tokens/s)
    DRAG k=20 m=2, 8.5k tokens                        89 s         (~95 tokens/s)
    DRAG k=20 m=4, 14.0k / 15.6k tokens               203 / 233 s  (~68 tokens/s)
    IterDRAG k=0 m=1 n=3, 6 calls, 2.2k tokens        13 s
    IterDRAG k=0 m=0 n=1, 3 calls, ~600 tokens        5-9 s

Shared with 2-3 other CPU-bound jobs (load average 5.5-6.7) every call is 6-8x slower: DRAG k=5 m=2
(1.9k / 2.3k) 86 / 105 s, k=20 m=0 (3.5k) 200 s, k=20 m=2 (9.2k) 573 s; IterDRAG k=5 m=0 n=5 (one call,
831 tokens) 80 s; one IterDRAG demonstration attempt with the 1.5B 85-150 s.

Full run (defaults: both datasets, 10 questions each = 7 fit + 3 held-back, budgets 1k-16k, k in
{0,1,2,5,10,20,50,100}, m in {0,1,2,4}, n in {1,2,3}, one configuration per budget band and strategy:
about 20 configurations per dataset, at most 1.6M input tokens in all):

    .venv/bin/python benchmarks/scaling.py

Measured on this 2-core machine (2026-11-23, warm prompt caches): 2.9 h of answering for the 400
answers, 1.0 h of it for the budgets up to 4k and 1.6 h of wall clock for 93 of the 8k and 16k bands; plus
10-15 min of IterDRAG demonstrations when the cache is cold. Under a load like the one above, 6-8x
that: stop it after the budgets that fit your time (the tables of the smaller budgets are complete),
or lower ``--questions``.

Smoke run (4 questions, budgets 1k and 2k, into a scratch directory; ~6 min of answering at load 1-2,
plus the demonstration cache when cold):

    .venv/bin/python benchmarks/scaling.py --questions 4 --budgets 1k,2k --out benchmarks/out/scaling-smoke
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from ragfunnel.corpus import load_corpus
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.errors import ConfigError, InputError, RagfunnelError
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.llm.base import LLM
from ragfunnel.llm.registry import resolve
from ragfunnel.methods.demonstrations import Demonstration, load_demonstrations, save_demonstrations
from ragfunnel.scaling.allocation import (
    BASE_THETAS,
    AllocationFit,
    Informativeness,
    fit,
    save_fit,
    tasks_from_summaries,
)
from ragfunnel.scaling.demonstrations import generate_iterdrag_demonstrations, make_drag_demonstrations
from ragfunnel.scaling.grid import (
    METRICS,
    STRATEGIES,
    Config,
    GridRow,
    default_grid,
    format_tokens,
    load_grid,
    parse_budgets,
    run_grid,
    within_budget,
)
from ragfunnel.scaling.planner import rank
from ragfunnel.scaling.plots import plot_predicted_vs_actual, plot_quality_vs_context
from ragfunnel.scaling.sizing import first_call_sizes, method_for
from ragfunnel.scaling.summary import ConfigSummary, optimal_per_budget, optimal_table, summarize
from ragfunnel.types import Example, Prediction

log = logging.getLogger("scaling")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DATASETS = {
    "musique": (DATA / "musique_train_hipporag" / "musique_train.json",
                DATA / "musique_train_hipporag" / "musique_train_corpus.json"),
    "hotpotqa": (DATA / "hotpotqa_train_hipporag" / "hotpotqa_train.json",
                 DATA / "hotpotqa_train_hipporag" / "hotpotqa_train_corpus.json"),
}
TASK = "multihop"
DEMO_ITERATIONS = 5  # the self-ask demonstrations may take the paper's most iterations
PROBE_QUESTIONS = 3  # grid questions the first-call sizes are measured on (the largest counts)


# ---------------------------------------------------------------- pure helpers (tested)


@dataclass(frozen=True)
class Split:
    """One dataset's questions: the grid's (fit + held-back) from the front, training ones from the back."""

    fit: list[Example]
    held_back: list[Example]
    train: list[Example]

    @property
    def grid(self) -> list[Example]:
        return self.fit + self.held_back


def split_questions(examples: Sequence[Example], questions: int, held_back: int, train: int) -> Split:
    """The first ``questions`` examples for the grid, the last ``held_back`` of them held back from the fit,
    and the last ``train`` examples of the file for demonstrations (never overlapping the grid's)."""
    if questions < 1:
        raise ConfigError(f"--questions must be at least 1, got {questions}")
    if not 0 <= held_back < questions:
        raise ConfigError(f"--held-back must be between 0 and --questions - 1 = {questions - 1}, got {held_back}: "
                          "at least one question must remain to fit on")
    if train < 0:
        raise ConfigError(f"--train must be >= 0, got {train}")
    if questions + train > len(examples):
        raise ConfigError(f"{questions} grid questions and {train} training questions need {questions + train} "
                          f"questions but the dataset has {len(examples)}; lower --questions or --train")
    grid = list(examples[:questions])
    return Split(grid[:questions - held_back], grid[questions - held_back:],
                 list(examples[len(examples) - train:]) if train else [])


def worst_case_tokens(config: Config, first_call: int) -> int:
    """An answer's largest effective context length given its first call: IterDRAG makes at most 2n + 1
    calls (n follow-ups, each followed by its intermediate answer, then the final answer), and its context
    only grows; the other strategies make one call."""
    return first_call * (2 * config.iterations + 1) if config.method == "iterdrag" else first_call


def base_configs(configs: Sequence[Config]) -> list[Config]:
    """The configurations among ``configs`` that the allocation model's i comes from (per method)."""
    present = set(configs)
    methods = dict.fromkeys(c.method for c in configs)
    return [c for m in methods for theta in BASE_THETAS if (c := Config.for_theta(m, *theta)) in present]


def select_configs(configs: Sequence[Config], cost: Callable[[Config], int], budgets: Sequence[int],
                   per_budget: int | None) -> list[Config]:
    """The configurations to run, cheapest first: those whose ``cost`` fits the largest budget, thinned to the
    base configurations plus, per budget band (previous budget, budget] and strategy, the ``per_budget``
    dearest (the ones that use the budget most fully). ``per_budget`` None keeps every fitting one."""
    budgets = sorted(budgets)
    fitting = sorted((c for c in dict.fromkeys(configs) if cost(c) <= budgets[-1]), key=lambda c: (cost(c), c.label))
    if per_budget is None:
        return fitting
    if per_budget < 0:
        raise ConfigError(f"--per-budget must be >= 0, got {per_budget}")
    chosen = set(base_configs(fitting))
    lower = 0
    for budget in budgets:
        band = [c for c in fitting if lower < cost(c) <= budget]
        for strategy in STRATEGIES:
            dearest = sorted((c for c in band if c.strategy == strategy), key=lambda c: (-cost(c), c.label))
            chosen.update(dearest[:per_budget])
        lower = budget
    return [c for c in fitting if c in chosen]


def summary_json(s: ConfigSummary | None) -> dict[str, Any] | None:
    if s is None:
        return None
    k, m, n = s.config.theta
    return {"strategy": s.config.strategy, "k": k, "m": m, "n": n, "questions": s.n, "failures": s.failures,
            "tokens": None if s.effective_tokens is None else round(s.effective_tokens, 1),
            "em": round(s.em, 4), "f1": round(s.f1, 4), "accuracy": round(s.accuracy, 4),
            "seconds": round(s.seconds, 2)}


def r2(actual: Sequence[float], predicted: Sequence[float]) -> float | None:
    """Coefficient of determination; None without variance to explain (or without points)."""
    y, p = np.asarray(actual, dtype=float), np.asarray(predicted, dtype=float)
    total = float(np.sum((y - y.mean()) ** 2)) if len(y) else 0.0
    return None if total == 0.0 else 1.0 - float(np.sum((y - p) ** 2)) / total


# ---------------------------------------------------------------- one dataset


@dataclass
class Dataset:
    name: str
    index: CorpusIndex
    index_dir: Path
    split: Split
    drag_demos: list[Demonstration]
    iterdrag_demos: list[Demonstration]
    demo_files: dict[str, Path]
    demo_log: dict[str, Any]
    configs: list[Config] = field(default_factory=list)  # to run, cheapest first
    first_call: dict[Config, int] = field(default_factory=dict)
    dropped: dict[str, list[str]] = field(default_factory=dict)

    def estimate(self, config: Config) -> int:
        return worst_case_tokens(config, self.first_call[config])


def slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in ".-" else "-" for ch in text)


def iterdrag_demonstrations(train: list[Example], index: CorpusIndex, llm: LLM, *, need: int, k: int, tries: int,
                            path: Path) -> list[Demonstration]:
    """Self-ask demonstrations on the first ``tries`` training questions, a few at a time until ``need`` are
    kept (the library's generator resumes from ``path`` and its log, so no question is tried twice)."""
    kept = load_demonstrations(path) if path.exists() and path.stat().st_size else []
    last = min(tries, len(train))
    end = min(last, demo_log(path)["tried"])  # tried in order, so the first ``end`` are done
    while len(kept) < need and end < last:
        end = min(last, end + max(2, 2 * (need - len(kept))))
        kept = generate_iterdrag_demonstrations(train[:end], index, llm, k, DEMO_ITERATIONS, out=path)
        log.info("iterdrag demonstrations: %d kept of the first %d training questions", len(kept), end)
    return kept


def demo_log(path: Path) -> dict[str, Any]:
    log_path = path.with_name(path.name + ".log.jsonl")
    tried = [json.loads(line) for line in log_path.read_text().splitlines()] if log_path.exists() else []
    return {"tried": len(tried), "kept": sum(1 for t in tried if t["kept"]),
            "why_not": sorted({t["why"].split(" ")[0] for t in tried if not t["kept"]})}


def prepare(name: str, args: argparse.Namespace, llm: LLM, budgets: list[int]) -> Dataset:
    questions_path, corpus_path = DATASETS[name]
    work = args.work / name
    index_dir = work / "index"
    docs = load_corpus(corpus_path)
    try:
        build_index(docs, index_dir, source=str(corpus_path))
    except ConfigError as e:  # our own cache, built by other code (the checksum changed): build it again
        log.warning("%s; rebuilding it", e)
        build_index(docs, index_dir, source=str(corpus_path), force=True)
    index = CorpusIndex(index_dir)
    split = split_questions(load_dataset(questions_path).examples, args.questions, args.held_back, args.train)
    grid_ids = {e.id for e in split.grid}
    probe = [e.question for e in split.grid[:PROBE_QUESTIONS]]

    configs = default_grid(args.strategies, documents=args.documents, shots=args.shots, iterations=args.iterations)
    if max(args.shots) > len(split.train):
        raise ConfigError(f"m up to {max(args.shots)} needs as many training questions for demonstrations but "
                          f"--train is {len(split.train)}; raise --train or lower --shots")
    drag_path = work / f"drag-demonstrations_train{args.train}.jsonl"
    drag_demos = make_drag_demonstrations(split.train, index, max(args.documents))
    save_demonstrations(drag_demos, drag_path)
    iter_path = work / (f"iterdrag-demonstrations_{slug(args.demo_model)}_train{args.train}"
                        f"_k{args.demo_documents}.jsonl")
    iter_demos = load_demonstrations(iter_path) if iter_path.exists() and iter_path.stat().st_size else []
    ds = Dataset(name, index, index_dir, split, drag_demos, iter_demos, {"drag": drag_path, "iterdrag": iter_path},
                 {})

    def build(config: Config, answering: LLM) -> Any:
        return make_method(ds, config, answering)

    iterdrag = [c for c in configs if c.method == "iterdrag"]
    need = max((c.shots for c in iterdrag), default=0)
    stand_in = len(iter_demos) < need
    if stand_in:
        # How many chains the budgets call for: IterDRAG sized with DRAG's demonstrations as stand-ins
        # (shorter than self-ask ones, so no configuration that could fit is missed).
        ds.iterdrag_demos = drag_demos
        sizes = first_call_sizes(iterdrag, probe, budgets[-1], build, llm)
        need = max((c.shots for c in iterdrag if worst_case_tokens(c, sizes[c]) <= budgets[-1]), default=0)
        if not args.dry_run and len(iter_demos) < need:
            iter_demos = iterdrag_demonstrations(split.train, index, resolve(args.demo_model), need=need,
                                                 k=args.demo_documents, tries=args.demo_tries, path=iter_path)
        exhausted = demo_log(iter_path)["tried"] >= min(args.demo_tries, len(split.train))
        stand_in = args.dry_run and len(iter_demos) < need and not exhausted
        ds.iterdrag_demos = drag_demos if stand_in else iter_demos
    ds.demo_log = demo_log(iter_path)
    leaked = grid_ids & {d.id for d in drag_demos + iter_demos}
    if leaked:
        raise InputError(f"{name}: demonstrations of grid questions {sorted(leaked)}; delete {work} and re-run")
    if stand_in:
        log.warning("%s: dry run without %d cached IterDRAG demonstrations; IterDRAG sized with DRAG's", name, need)
    else:  # an IterDRAG configuration needs as many kept chains as its m
        short = [c for c in iterdrag if c.shots > len(iter_demos)]
        if short:
            ds.dropped[f"only {len(iter_demos)} IterDRAG demonstrations kept"] = [c.label for c in short]
            log.warning("%s: %d IterDRAG configuration(s) need more than the %d demonstrations kept; left out",
                        name, len(short), len(iter_demos))
            configs = [c for c in configs if c not in short]

    ds.first_call = first_call_sizes(configs, probe, budgets[-1], build, llm)
    sized = list(ds.first_call)
    within_budget(sized, budgets[-1], ds.estimate)  # says which is the smallest if none fits
    ds.configs = select_configs(sized, ds.estimate, budgets, args.per_budget)
    over = [c.label for c in sized if ds.estimate(c) > budgets[-1]]
    if over:
        ds.dropped[f"worst case over {format_tokens(budgets[-1])} tokens"] = over
    thinned = [c.label for c in sized if ds.estimate(c) <= budgets[-1] and c not in ds.configs]
    if thinned:
        ds.dropped["not among the dearest per budget and strategy (--per-budget)"] = thinned
    for budget in budgets:  # every budget must admit something, or its table row would be empty
        within_budget(ds.configs, budget, ds.estimate)
    return ds


def make_method(ds: Dataset, config: Config, llm: LLM) -> Any:
    demos = ds.iterdrag_demos if config.method == "iterdrag" else ds.drag_demos
    return method_for(config, index=ds.index, strong=llm, demonstrations=demos, task=TASK)


class Logged:
    """A method that logs each answer: a long run off a terminal shows no progress bar."""

    def __init__(self, dataset: str, config: Config, method: Any):
        self.dataset, self.config, self.method = dataset, config, method

    def run(self, question: str) -> Prediction:
        started = time.perf_counter()
        p = self.method.run(question)
        log.info("%s | %s | %d tokens, %.1f s | %r", self.dataset, self.config.label, p.trace.input_tokens,
                 time.perf_counter() - started, p.answer[:60])
        return p


def run_meta(ds: Dataset, args: argparse.Namespace) -> dict[str, Any]:
    """What the rows depend on (not which questions, budgets or grid values: more of those only adds rows)."""
    questions, corpus = DATASETS[ds.name]
    return {"benchmark": "benchmarks/scaling.py", "dataset": str(questions), "corpus": str(corpus),
            "index": str(ds.index_dir.resolve()), "model": args.model, "task": TASK, "train": args.train,
            "demonstrations": {m: str(p.resolve()) for m, p in ds.demo_files.items()},
            "demo_model": args.demo_model, "demo_documents": args.demo_documents}


# ---------------------------------------------------------------- analysis


@dataclass
class Results:
    all: list[ConfigSummary]
    fit: list[ConfigSummary]
    held_back: list[ConfigSummary]
    rows: int
    failures: int
    seconds: float


def results_of(ds: Dataset, run_dir: Path) -> Results:
    """Summaries over this run's grid questions and configurations (the directory may hold more)."""
    fit_ids, held_ids = {e.id for e in ds.split.fit}, {e.id for e in ds.split.held_back}
    wanted = set(ds.configs)
    rows: list[GridRow] = [r for r in load_grid(run_dir).rows
                           if r.config in wanted and r.example_id in fit_ids | held_ids]
    return Results(summarize(rows), summarize([r for r in rows if r.example_id in fit_ids]),
                   summarize([r for r in rows if r.example_id in held_ids]), len(rows),
                   sum(1 for r in rows if r.error is not None), sum(r.seconds for r in rows))


def best_of(summaries: Sequence[ConfigSummary], budget: int, metric: str) -> ConfigSummary | None:
    return next(o.best for o in optimal_per_budget(summaries, [budget], metric) if o.strategy == "best")


def fit_allocation(results: dict[str, Results], metric: str) -> tuple[AllocationFit | None, dict[str, Any],
                                                                      dict[str, dict[str, Informativeness]]]:
    """The allocation model over every dataset's fit questions, its R² there and on the held-back ones."""
    tasks, notes = [], []
    for name, r in results.items():
        for method in ("drag", "iterdrag"):  # one method lacking its base configurations leaves the other in
            mine = [s for s in r.fit if s.config.method == method]
            try:
                tasks += tasks_from_summaries(name, mine, metric) if mine else []
            except (ConfigError, InputError) as e:
                notes.append(f"{name} [{method}] left out of the fit: {e}")
    informativeness = {name: {t.method: t.i for t in tasks if t.name.startswith(f"{name} [")} for name in results}
    try:
        if not tasks:
            raise ConfigError("no dataset has the base configurations to fit on")
        allocation = fit(tasks, metric=metric)
    except ConfigError as e:
        return None, {"error": str(e), "notes": notes}, informativeness
    actual, predicted = [], []
    for name, r in results.items():
        for s in r.held_back:
            i = informativeness[name].get(s.config.method)
            if i is not None and s.effective_tokens is not None:
                actual.append(s.metric(metric))
                predicted.append(allocation.predict(s.config, i))
    data = {k: v for k, v in allocation.to_json().items() if k != "tasks"}
    data |= {"i": {t.name: {"doc": t.i.doc, "shot": t.i.shot} for t in tasks}, "notes": notes,
             "held_back": {"points": len(actual), "r2_metric": r2(actual, predicted),
                           "mse_metric": float(np.mean((np.array(actual) - np.array(predicted)) ** 2))
                           if actual else None}}
    return allocation, data, informativeness


def compare_planner(allocation: AllocationFit, i: dict[str, Informativeness], r: Results, budgets: Sequence[int],
                    metric: str) -> list[dict[str, Any]]:
    """Per budget: the planner's θ (from the fit questions' i and token costs), scored on the held-back
    questions, against the best θ found there and the θ that did best on the fit questions."""
    tokens = {s.config: round(s.effective_tokens) for s in r.fit
              if s.effective_tokens is not None and s.config.method in i}
    held = {s.config: s for s in r.held_back}
    out = []
    for budget in budgets:
        entry: dict[str, Any] = {"budget": budget}
        try:
            choice = rank(allocation, budget, list(tokens), tokens.__getitem__, i)[0]
        except ConfigError as e:
            entry["error"] = str(e)
            out.append(entry)
            continue
        oracle, fit_best = best_of(r.held_back, budget, metric), best_of(r.fit, budget, metric)
        mine = held.get(choice.config)
        entry |= {"planner": summary_json(mine) or {"strategy": choice.config.strategy,
                                                     "k": choice.config.documents, "m": choice.config.shots,
                                                     "n": choice.config.iterations},
                  "predicted": round(choice.predicted, 4), "fit_tokens": choice.estimated_tokens,
                  "considered": choice.considered, "oracle": summary_json(oracle),
                  "fit_best": summary_json(held.get(fit_best.config) if fit_best else None)}
        if mine is not None and oracle is not None:
            entry["gap"] = round(oracle.metric(metric) - mine.metric(metric), 4)
            entry["ratio"] = round(mine.metric(metric) / oracle.metric(metric), 4) if oracle.metric(metric) else None
        out.append(entry)
    return out


def theta(s: dict[str, Any] | None) -> str:
    return "-" if s is None else f"{s['strategy']} ({s['k']},{s['m']},{s['n']})"


def value(s: dict[str, Any] | None, metric: str) -> str:
    return "-" if s is None or metric not in s else f"{s[metric]:.3f}"


def markdown(summary: dict[str, Any], tables: dict[str, str], metric: str) -> str:
    s = summary
    lines = [f"# Inference scaling: {', '.join(s['datasets'])} ({s['settings']['model']})", "",
             f"{s['date']}, {s['machine']}", "", f"    {s['command']}", ""]
    for name, d in s["datasets"].items():
        lines += [f"## {name}", "",
                  f"{d['questions']['fit']} fit + {d['questions']['held_back']} held-back questions, "
                  f"{d['configurations']} configurations, {d['rows']} answers ({d['failures']} failed), "
                  f"{d['grid_seconds'] / 3600:.2f} h of answering; demonstrations: {d['demonstrations']['drag']} DRAG, "
                  f"{d['demonstrations']['iterdrag']} IterDRAG kept of {d['demonstrations']['iterdrag_tried']} "
                  "training questions tried", "", tables[name]]
    f = s["fit"]
    lines += ["## Computation allocation model", ""]
    if "error" in f:
        lines += [f"**Not fitted:** {f['error']}", ""]
    else:
        a, b = f["a"], f["b"]
        held = f["held_back"]
        lines += [f"Fitted on the fit questions' configurations ({f['n_points']} points, metric {f['metric']}):",
                  "", f"a = ({a[0]:.4f}, {a[1]:.4f}, {a[2]:.4f}), b = ({b[0]:.4f}, {b[1]:.4f}, 0), c = {f['c']:.4f}"
                  + (f"; held at 0 (not identifiable): {', '.join(f['fixed'])}" if f["fixed"] else ""), "",
                  f"- R² (logit) {_num(f['r2_logit'])}, MSE {f['mse_logit']:.4f}",
                  f"- R² ({f['metric']}) {_num(f['r2_metric'])}, MSE {f['mse_metric']:.4f}",
                  f"- on the held-back questions ({held['points']} points): R² ({f['metric']}) "
                  f"{_num(held['r2_metric'])}, MSE {_num(held['mse_metric'])}", ""]
        lines += [f"- i of {t}: i_doc {v['doc']:+.3f}, i_shot {v['shot']:+.3f}" for t, v in f["i"].items()]
        lines.append("")
    for note in f.get("notes", []):
        lines += [f"Note: {note}", ""]
    lines += ["## Planner vs the best configuration on the held-back questions", ""]
    if not s["planner"]:
        lines += [f"Not compared: {s.get('planner_note', 'no fit')}", ""]
    else:
        lines += [f"θ = (k, m, n); {metric} on the held-back questions. *fit-best*: the θ that did best on the "
                  "fit questions within the budget.", "",
                  "| dataset | L_max | planner θ | predicted | planner | best θ (held-back) | best | planner/best "
                  "| fit-best θ | fit-best |", "|---|---|---|---|---|---|---|---|---|---|"]
        for name, entries in s["planner"].items():
            for e in entries:
                if "error" in e:
                    lines.append(f"| {name} | {format_tokens(e['budget'])} | {e['error']} |||||||| ")
                    continue
                ratio = "-" if e.get("ratio") is None else f"{e['ratio']:.2f}"
                lines.append(f"| {name} | {format_tokens(e['budget'])} | {theta(e['planner'])} | "
                             f"{e['predicted']:.3f} | {value(e['planner'], metric)} | {theta(e['oracle'])} | "
                             f"{value(e['oracle'], metric)} | {ratio} | {theta(e['fit_best'])} | "
                             f"{value(e['fit_best'], metric)} |")
        lines.append("")
    return "\n".join(lines)


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{platform.machine()} {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load average at start {load}")


# ---------------------------------------------------------------- main


def ints(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers like 0,1,2,5; got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def names(text: str, valid: Sequence[str]) -> list[str]:
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in valid]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown) or 'empty list'}; valid: {', '.join(valid)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=lambda t: names(t, list(DATASETS)), default=list(DATASETS),
                        help="comma-separated: " + ", ".join(DATASETS))
    parser.add_argument("--questions", type=int, default=10, help="grid questions per dataset (fit + held-back)")
    parser.add_argument("--held-back", type=int, help="of the grid questions, how many the fit never sees "
                        "[default: a third of --questions]")
    parser.add_argument("--train", type=int, default=30,
                        help="training questions (the file's last) demonstrations come from")
    parser.add_argument("--budgets", type=parse_budgets, default=parse_budgets("1k,2k,4k,8k,16k"),
                        help="token budgets L_max (default 1k,2k,4k,8k,16k)")
    parser.add_argument("--model", default="bundled:qwen2.5-0.5b", help="answering model (see above for why 0.5B)")
    parser.add_argument("--strategies", type=lambda t: names(t, STRATEGIES), default=list(STRATEGIES),
                        help="comma-separated: " + ", ".join(STRATEGIES))
    parser.add_argument("--documents", type=ints, default=ints("0,1,2,5,10,20,50,100"), help="values of k")
    parser.add_argument("--shots", type=ints, default=ints("0,1,2,4"), help="values of m")
    parser.add_argument("--iterations", type=ints, default=ints("1,2,3"), help="values of n (IterDRAG)")
    parser.add_argument("--per-budget", type=lambda t: None if t == "all" else int(t), default=1,
                        help="configurations run per budget band and strategy, the dearest first, besides the base "
                        "ones ('all': every one that fits)")
    parser.add_argument("--demo-model", default="bundled:qwen2.5-1.5b",
                        help="model that writes the IterDRAG demonstrations (see above for why not the 0.5B)")
    parser.add_argument("--demo-documents", type=int, default=5,
                        help="k with which IterDRAG demonstrations are generated (and stored)")
    parser.add_argument("--demo-tries", type=int, default=12,
                        help="most training questions tried for IterDRAG demonstrations per dataset")
    parser.add_argument("--metric", choices=METRICS, default="accuracy",
                        help="what the tables, fit and planner optimise (accuracy: a reference within the answer)")
    parser.add_argument("--work", type=Path, default=Path("benchmarks/out/scaling"),
                        help="indexes and demonstration caches")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/scaling"),
                        help="rows, tables, fit and plots (re-running with it resumes)")
    parser.add_argument("--cold-caches", action="store_true",
                        help="drop the model's prompt cache before every answer (slower; for timing answers)")
    parser.add_argument("--dry-run", action="store_true", help="list the configurations and their cost, then stop")
    args = parser.parse_args()
    if args.held_back is None:
        args.held_back = args.questions // 3
    if not all(DATASETS[n][0].exists() for n in args.datasets):
        parser.error(f"shared data not found under {DATA}")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("scaling", "ragfunnel.scaling"):
        logging.getLogger(name).setLevel(logging.INFO)
    try:
        run(args)
    except RagfunnelError as e:
        sys.exit(f"error: {e}")


def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    budgets, metric = args.budgets, args.metric
    llm = resolve(args.model)
    datasets = {name: prepare(name, args, llm, budgets) for name in args.datasets}
    for ds in datasets.values():
        pairs = len(ds.configs) * len(ds.split.grid)
        tokens = sum(ds.estimate(c) for c in ds.configs) * len(ds.split.grid)
        log.info("%s: %d configurations x %d questions = %d answers, at most %.2fM input tokens; %s",
                 ds.name, len(ds.configs), len(ds.split.grid), pairs, tokens / 1e6,
                 "; ".join(f"{len(v)} left out ({k})" for k, v in ds.dropped.items()) or "none left out")
    if args.dry_run:
        for ds in datasets.values():
            print(f"\n{ds.name}: first-call / worst-case tokens")
            for c in ds.configs:
                print(f"  {c.label:<32} {ds.first_call[c]:>6} {ds.estimate(c):>7}")
        return

    # Budget by budget over all datasets, so a stopped run leaves the smaller budgets' tables whole.
    for budget in budgets:
        for ds in datasets.values():
            configs = [c for c in ds.configs if ds.estimate(c) <= budget]
            result = run_grid(ds.split.grid, configs,
                              lambda c, ds=ds: Logged(ds.name, c, make_method(ds, c, llm)),
                              args.out / ds.name, config_meta=run_meta(ds, args), cold_caches=args.cold_caches)
            log.info("%s, configurations within %s: %d answers written, %d in the run", ds.name,
                     format_tokens(budget), result.written, len(result.rows))

    results = {name: results_of(ds, args.out / name) for name, ds in datasets.items()}
    tables, per_dataset = {}, {}
    for name, ds in datasets.items():
        r = results[name]
        optima = optimal_per_budget(r.all, budgets, metric)
        tables[name] = optimal_table(optima, metric)
        plot_quality_vs_context(r.all, optima, metric, args.out / name / "quality_vs_context.png")
        per_dataset[name] = {
            "questions": {"fit": len(ds.split.fit), "held_back": len(ds.split.held_back),
                          "fit_ids": [e.id for e in ds.split.fit],
                          "held_back_ids": [e.id for e in ds.split.held_back], "train": len(ds.split.train)},
            "demonstrations": {"drag": len(ds.drag_demos), "iterdrag": len(ds.iterdrag_demos),
                               "iterdrag_tried": ds.demo_log["tried"], "iterdrag_rejected_because": ds.demo_log[
                                   "why_not"], "files": {m: str(p) for m, p in ds.demo_files.items()}},
            "configurations": len(ds.configs), "left_out": ds.dropped, "rows": r.rows, "failures": r.failures,
            "grid_seconds": round(r.seconds, 1),
            "optimal": [{"budget": o.budget, "strategy": o.strategy, "best": summary_json(o.best)} for o in optima],
            "configurations_summary": [summary_json(s) for s in r.all],
        }

    allocation, fit_data, informativeness = fit_allocation(results, metric)
    planner: dict[str, list[dict[str, Any]]] = {}
    planner_note = None
    if allocation is None:
        planner_note = f"the allocation model could not be fitted ({fit_data['error']})"
        log.warning("no allocation fit: %s", fit_data["error"])
    else:
        save_fit(allocation, args.out / "allocation.json")
        plot_predicted_vs_actual(allocation, args.out / "predicted_vs_actual.png")
        for name, r in results.items():
            i = informativeness[name]
            if not r.held_back:
                planner_note = "no held-back questions (--held-back 0)"
            elif i:
                planner[name] = compare_planner(allocation, i, r, budgets, metric)
            else:
                planner_note = f"{name} has no informativeness i (base configurations missing)"

    summary = {
        "date": date.today().isoformat(), "machine": machine(),
        "command": shlex.join([sys.executable, *sys.argv]),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "seconds_this_invocation": round(time.perf_counter() - started, 1),
        "datasets": per_dataset, "fit": fit_data, "planner": planner,
    }
    if planner_note:
        summary["planner_note"] = planner_note
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.json").write_text(json.dumps(summary, indent=2) + "\n")
    md = markdown(summary, tables, metric)
    (args.out / "scaling.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
