"""Planning one task with a fitted allocation model: which configurations are candidates (those run on
the task, those run on the fit's grids and, on request, ones never run), where each one's token count
comes from, and the ranked proposals as text or JSON (what ``ragfunnel plan`` prints)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ragfunnel.errors import ConfigError
from ragfunnel.scaling.allocation import AllocationFit, Informativeness, Observation, informativeness
from ragfunnel.scaling.grid import DEFAULT_DOCUMENTS, DEFAULT_ITERATIONS, DEFAULT_SHOTS, Config, format_tokens
from ragfunnel.scaling.planner import PlanChoice, TokenCosts, TokenEstimator, candidate_space, rank, token_costs
from ragfunnel.scaling.summary import ConfigSummary


def task_informativeness(summaries: Sequence[ConfigSummary], methods: Iterable[str], metric: str,
                         task: str) -> tuple[dict[str, Informativeness], dict[str, str]]:
    """i of each of ``methods`` the task has base configurations for (in name order), and why the others
    have none; a ConfigError when none has."""
    found, lacking = {}, {}
    for method in sorted(methods):
        obs = [Observation(s.config, s.metric(metric), s.effective_tokens) for s in summaries
               if s.config.method == method]
        try:
            found[method] = informativeness(obs, method, task=task)
        except ConfigError as e:
            lacking[method] = str(e)
    if not found:
        raise ConfigError(next(iter(lacking.values())))
    return found, lacking


@dataclass(frozen=True)
class TaskCandidates:
    """What a plan for one task ranks: the candidate configurations (each of a method with an i and with
    a token count), the task's i and per-unit token costs per method, the token counts, and notes on what
    was left out and why."""

    configs: tuple[Config, ...]
    i: dict[str, Informativeness]
    costs: dict[str, TokenCosts]
    tokens: TokenEstimator
    notes: tuple[str, ...] = ()

    def rank(self, allocation: AllocationFit, budget: int) -> list[PlanChoice]:
        """The candidates that fit ``budget``, best predicted first; those the task did not run are marked
        ``never_run`` (see :func:`ragfunnel.scaling.planner.rank`)."""
        return rank(allocation, budget, self.configs, self.tokens, self.i, ran=self.tokens.measured)


def task_candidates(
    allocation: AllocationFit,
    summaries: Iterable[ConfigSummary],
    *,
    task: str,
    unrun: bool = False,
    documents: Sequence[int] = DEFAULT_DOCUMENTS,
    shots: Sequence[int] = DEFAULT_SHOTS,
    iterations: Sequence[int] = DEFAULT_ITERATIONS,
) -> TaskCandidates:
    """The candidates for the task whose grid run ``summaries`` describe (named ``task`` in messages).

    They are the configurations it ran, then those the fit's grids ran, then with ``unrun`` every
    configuration of ``documents`` x ``shots`` x ``iterations``; each keeps the first token count of: its
    mean on the task, an estimate from the task's per-unit costs, its mean over the fit's grids. A method
    the task lacks base configurations for (so no i), and a configuration with no token count, is left out.
    """
    summaries = [s for s in summaries if s.effective_tokens is not None]
    measured = {s.config: s.effective_tokens for s in summaries}
    seen: dict[Config, list[float]] = {}
    for t in allocation.tasks:
        for o in t.observations:
            seen.setdefault(o.config, []).append(o.effective_tokens)
    elsewhere = {c: sum(v) / len(v) for c, v in seen.items()}
    i, lacking = task_informativeness(summaries, {c.method for c in [*measured, *elsewhere]}, allocation.metric,
                                      task)
    notes = [f"{method} candidates left out: {reason}" for method, reason in lacking.items()]
    costs = {}
    for method in i:
        try:
            costs[method] = token_costs([Observation(s.config, s.metric(allocation.metric), s.effective_tokens)
                                         for s in summaries], method)
        except ConfigError as e:
            notes.append(f"{method} tokens of configurations the task did not run: {e}")
    tokens = TokenEstimator(measured, costs, elsewhere)
    space = candidate_space(i, documents=documents, shots=shots, iterations=iterations) if unrun else []
    configs = [c for c in dict.fromkeys([*measured, *elsewhere, *space])
               if c.method in i and tokens.source(c) is not None]
    return TaskCandidates(tuple(configs), i, costs, tokens, tuple(notes))


def provenance(source: str | None, on_fit_grids: bool) -> str:
    """Where a proposal comes from, in words: measured on the task, or (never run there) whether the fit's
    grids ran it and whence its tokens (``source`` as :meth:`TokenEstimator.source` says)."""
    if source == "task":
        return "measured on the task"
    ran = "run on the fit's grids, never on the task" if on_fit_grids else "never run"
    how = "tokens: its mean on the fit's grids" if source == "fit" else "tokens estimated from the task's unit costs"
    return f"{ran}; {how}"


def proposal_json(choice: PlanChoice, unit: str, source: str | None, on_fit_grids: bool) -> dict[str, Any]:
    """One proposal as JSON: its θ, predicted score (in ``unit``) and tokens, where the tokens come from
    (``source``), and where it ran ("task", "fit" for the fit's grids only, or None)."""
    c = choice.config
    return {"strategy": c.strategy, "documents": c.documents, "shots": c.shots, "iterations": c.iterations,
            "predicted": round(choice.predicted, 6), "unit": unit, "estimated_tokens": choice.estimated_tokens,
            "tokens_from": source, "never_run": choice.never_run,
            "ran_on": "task" if not choice.never_run else "fit" if on_fit_grids else None}


def plan_report(ranked: Sequence[PlanChoice], allocation: AllocationFit, candidates: TaskCandidates) -> str:
    """The proposals ``ranked`` (best first, at least one), a line each: θ, predicted score, tokens and
    their provenance; the first line also says how many candidates fit the budget."""
    lines = []
    for n, choice in enumerate(ranked):
        value = f"{choice.predicted:.3f}" if allocation.normalize == "none" else f"{choice.predicted:+.3f}"
        source = candidates.tokens.source(choice.config)
        line = (f"{choice.config.label}: predicted {allocation.unit} {value} at ~"
                f"{format_tokens(choice.estimated_tokens)} tokens "
                f"({provenance(source, choice.config in candidates.tokens.elsewhere)})")
        if n == 0:
            line += f"; {choice.considered} of {len(candidates.configs)} candidates fit {format_tokens(choice.budget)}"
        lines.append(line)
    return "\n".join(lines)


def plan_json(ranked: Sequence[PlanChoice], allocation: AllocationFit, candidates: TaskCandidates) -> dict[str, Any]:
    """The proposals ``ranked`` (best first, at least one) as JSON: the best one's fields, then the metric,
    the budget, how many candidates fit it, the normalisation, the task's i and token costs per method,
    and every proposal."""
    proposals = [proposal_json(p, allocation.unit, candidates.tokens.source(p.config),
                               p.config in candidates.tokens.elsewhere) for p in ranked]
    return {**proposals[0], "metric": allocation.metric, "budget": ranked[0].budget,
            "considered": ranked[0].considered, "normalize": allocation.normalize,
            "i": {m: {"doc": v.doc, "shot": v.shot} for m, v in candidates.i.items()},
            "token_costs": {m: c.to_json() for m, c in candidates.costs.items()}, "proposals": proposals}
