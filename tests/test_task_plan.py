"""Planning one task: its i, its candidates and their token sources, the proposals as text and JSON (no model)."""

import math

import pytest

from ragfunnel.errors import ConfigError
from ragfunnel.scaling.allocation import AllocationFit, Informativeness, Observation, Task
from ragfunnel.scaling.grid import Config
from ragfunnel.scaling.planner import PlanChoice
from ragfunnel.scaling.summary import ConfigSummary
from ragfunnel.scaling.task_plan import (
    plan_json,
    plan_report,
    proposal_json,
    provenance,
    task_candidates,
    task_informativeness,
)


def summary(config, f1, tokens):
    return ConfigSummary(config, 2, 0, 0.0, 0.0, f1, tokens, tokens or 0, 1.0)


# The task's run: tokens 100 + 100 k (m + 1) + 50 m; F1 of the base configurations 0.125, 0.375, 0.25, so
# i_doc = 0.375 - 0.125 = 0.25 and i_shot = 0.25 - 0.125 = 0.125. Every answer of drag k=2 m=2 failed.
RUN = [summary(Config("zero-shot", 0, 0), 0.125, 100.0), summary(Config("rag", 1, 0), 0.375, 200.0),
       summary(Config("drag", 0, 1), 0.25, 150.0), summary(Config("rag", 2, 0), 0.375, 300.0),
       summary(Config("drag", 1, 1), 0.5, 350.0), summary(Config("drag", 2, 2), 0.0, None)]


def observed(config, tokens):
    return Observation(config, 0.5, tokens)


# The fit's grids ran rag k=10 (1,100 and 1,300 tokens: mean 1,200) and an IterDRAG configuration the task lacks
# the base configurations for. F1 = σ(0.4 ln(k + 0.01) + 0.15 ln(m + 0.01) − 1): b = 0, so i does not matter.
FIT = AllocationFit(
    metric="f1", a=(0.4, 0.15, 0.0), b=(0.0, 0.0, 0.0), c=-1.0, fixed=(), r2_logit=None, mse_logit=0.0,
    r2_metric=None, mse_metric=0.0,
    tasks=(Task("x [drag]", "drag", Informativeness(0.1, 0.1),
                (observed(Config("zero-shot", 0, 0), 90.0), observed(Config("rag", 10, 0), 1100.0))),
           Task("y [drag]", "drag", Informativeness(0.1, 0.1), (observed(Config("rag", 10, 0), 1300.0),)),
           Task("y [iterdrag]", "iterdrag", Informativeness(0.1, 0.1),
                (observed(Config("iterdrag", 1, 1, 2), 2000.0),))))
IDRAG_LACKING = ("t lacks the base configuration(s) iterdrag k=0 m=0 n=1, iterdrag k=1 m=0 n=1, iterdrag k=0 m=1 "
                 "n=1 that i_doc and i_shot come from; run them too (a grid whose k and m include 0 and 1)")


def f1(k, m):
    return 1 / (1 + math.exp(-(0.4 * math.log(k + 0.01) + 0.15 * math.log(m + 0.01) - 1)))


def test_task_informativeness_gives_each_method_with_base_configurations_its_i():
    i, lacking = task_informativeness(RUN, {"iterdrag", "drag"}, "f1", "t")
    assert i == {"drag": Informativeness(doc=0.25, shot=0.125)}
    assert lacking == {"iterdrag": IDRAG_LACKING}
    with pytest.raises(ConfigError, match=r"^t lacks the base configuration\(s\) iterdrag k=0 m=0 n=1"):
        task_informativeness(RUN, {"iterdrag"}, "f1", "t")


def test_candidates_are_the_tasks_then_the_fit_grids_configurations_with_notes_on_what_is_left_out():
    candidates = task_candidates(FIT, RUN, task="t")
    # The task's five answered configurations, then rag k=10 from the fit's grids; not drag k=2 m=2 (never
    # answered) nor IterDRAG (no i).
    assert [c.label for c in candidates.configs] == [
        "zero-shot k=0 m=0 n=1", "rag k=1 m=0 n=1", "drag k=0 m=1 n=1", "rag k=2 m=0 n=1", "drag k=1 m=1 n=1",
        "rag k=10 m=0 n=1"]
    assert candidates.i == {"drag": Informativeness(0.25, 0.125)}
    assert candidates.notes == (f"iterdrag candidates left out: {IDRAG_LACKING}",)
    costs = candidates.costs["drag"]  # the run follows 100 + 100 k (m + 1) + 50 m exactly
    assert (costs.base, costs.per_document, costs.per_shot, costs.per_iteration) == pytest.approx((100, 100, 50, 0))
    assert candidates.tokens.elsewhere == {Config("zero-shot", 0, 0): 90.0, Config("rag", 10, 0): 1200.0,
                                           Config("iterdrag", 1, 1, 2): 2000.0}
    # Measured on the task first, then the task's unit costs (100 + 100·10 = 1,100), before the fit's mean.
    assert candidates.tokens(Config("zero-shot", 0, 0)) == 100 and candidates.tokens(Config("rag", 10, 0)) == 1100


def test_plan_report_lines_say_where_each_proposal_and_its_tokens_come_from():
    candidates = task_candidates(FIT, RUN, task="t")
    ranked = candidates.rank(FIT, 400)
    # Within 400 tokens: drag k=1 m=1 σ(0.55 ln 1.01 − 1) = 0.270 beats rag k=2 σ(0.4 ln 2.01 + 0.15 ln 0.01 − 1)
    # = 0.196; rag k=10 (1,100 tokens) does not fit.
    assert [p.predicted for p in ranked[:2]] == [pytest.approx(f1(1, 1)), pytest.approx(f1(2, 0))]
    assert plan_report(ranked[:2], FIT, candidates).splitlines() == [
        "drag k=1 m=1 n=1: predicted f1 0.270 at ~350 tokens (measured on the task); 5 of 6 candidates fit 400",
        "rag k=2 m=0 n=1: predicted f1 0.196 at ~300 tokens (measured on the task)"]


def test_unrun_candidates_are_proposed_with_tokens_from_the_tasks_unit_costs():
    candidates = task_candidates(FIT, RUN, task="t", unrun=True, documents=(0, 1, 2, 3), shots=(0, 1))
    assert [c.label for c in candidates.configs[6:]] == ["drag k=2 m=1 n=1", "rag k=3 m=0 n=1", "drag k=3 m=1 n=1"]
    ranked = candidates.rank(FIT, 1100)
    report = plan_report(ranked[:3], FIT, candidates).splitlines()
    # drag k=3 m=1: 100 + 100·3·2 + 50 = 750 tokens, F1 σ(0.4 ln 3.01 + 0.15 ln 1.01 − 1) = 0.364.
    assert report == [
        "drag k=3 m=1 n=1: predicted f1 0.364 at ~750 tokens (never run; tokens estimated from the task's unit "
        "costs); 9 of 9 candidates fit 1.1k",
        "drag k=2 m=1 n=1: predicted f1 0.328 at ~550 tokens (never run; tokens estimated from the task's unit "
        "costs)",
        "rag k=10 m=0 n=1: predicted f1 0.317 at ~1.1k tokens (run on the fit's grids, never on the task; tokens "
        "estimated from the task's unit costs)"]
    data = plan_json(ranked[:3], FIT, candidates)
    assert list(data) == ["strategy", "documents", "shots", "iterations", "predicted", "unit", "estimated_tokens",
                          "tokens_from", "never_run", "ran_on", "metric", "budget", "considered", "normalize", "i",
                          "token_costs", "proposals"]
    assert (data["strategy"], data["documents"], data["shots"], data["estimated_tokens"]) == ("drag", 3, 1, 750)
    assert data["predicted"] == round(f1(3, 1), 6) and (data["budget"], data["considered"]) == (1100, 9)
    assert data["i"] == {"drag": {"doc": 0.25, "shot": 0.125}} and data["normalize"] == "none"
    assert data["token_costs"]["drag"]["per_shot"] == pytest.approx(50)
    assert [(p["documents"], p["tokens_from"], p["never_run"], p["ran_on"]) for p in data["proposals"]] == [
        (3, "costs", True, None), (2, "costs", True, None), (10, "costs", True, "fit")]


def test_provenance_in_words():
    assert provenance("task", False) == "measured on the task"
    assert provenance("costs", False) == "never run; tokens estimated from the task's unit costs"
    assert provenance("costs", True) == ("run on the fit's grids, never on the task; tokens estimated from the "
                                         "task's unit costs")
    assert provenance("fit", True) == "run on the fit's grids, never on the task; tokens: its mean on the fit's grids"


def test_proposal_json_fields():
    choice = PlanChoice(Config("iterdrag", 2, 1, 3), 0.12345678, 2500, 4000, 7, never_run=True)
    assert proposal_json(choice, "f1 z-score", "fit", True) == {
        "strategy": "iterdrag", "documents": 2, "shots": 1, "iterations": 3, "predicted": 0.123457,
        "unit": "f1 z-score", "estimated_tokens": 2500, "tokens_from": "fit", "never_run": True, "ran_on": "fit"}
    ran = PlanChoice(Config("rag", 1, 0), 0.5, 200, 4000, 7)
    assert proposal_json(ran, "f1", "task", True)["ran_on"] == "task"


def test_a_z_score_prediction_is_signed():
    fit = AllocationFit(**{**FIT.__dict__, "normalize": "dataset", "sigmoid": (-2.0, 2.0)})
    candidates = task_candidates(fit, RUN, task="t")
    (best,) = candidates.rank(fit, 200)[:1]
    # rag k=1 at 200 tokens: −2 + 4 σ(0.4 ln 1.01 + 0.15 ln 0.01 − 1) = −2 + 4·0.156 = −1.375.
    assert plan_report([best], fit, candidates) == ("rag k=1 m=0 n=1: predicted f1 z-score -1.375 at ~200 tokens "
                                                    "(measured on the task); 3 of 6 candidates fit 200")
