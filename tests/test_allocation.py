"""The computation allocation model: fitting, identifiability, i from base configurations, JSON, planning,
per-dataset normalisation, token costs of unrun configurations, leave-one-dataset-out."""

import json
import logging
import math

import numpy as np
import pytest

from ragfunnel.errors import ConfigError, InputError
from ragfunnel.scaling.allocation import (
    AllocationFit,
    DatasetScale,
    Informativeness,
    Observation,
    Task,
    dataset_scales,
    fit,
    informativeness,
    load_fit,
    save_fit,
    tasks_from_summaries,
)
from ragfunnel.scaling.grid import Config, default_grid
from ragfunnel.scaling.leave_one_out import leave_one_dataset_out, spearman
from ragfunnel.scaling.planner import TokenCosts, TokenEstimator, candidate_space, rank, token_costs
from ragfunnel.scaling.summary import ConfigSummary

A, B, C = (0.30, 0.10, 0.18), (0.8, -0.5), -0.5
TASK_I = (Informativeness(0.05, 0.30), Informativeness(0.20, 0.10), Informativeness(0.35, 0.20))


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def true_logit(config, i, a=A, b=B, c=C):
    k, m, n = (math.log(v + 0.01) for v in config.theta)
    return (a[0] + b[0] * i.doc) * k + (a[1] + b[1] * i.shot) * m + a[2] * n + c


ITERDRAG = default_grid(["iterdrag"], documents=(0, 1, 2, 5, 10), shots=(0, 1, 2, 4), iterations=(1, 2, 3, 5))


def synthetic_tasks(noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    return [Task(f"task{j}", "iterdrag", i,
                 tuple(Observation(c, sigmoid(true_logit(c, i) + noise * rng.standard_normal()), 100.0)
                       for c in ITERDRAG))
            for j, i in enumerate(TASK_I)]


def test_synthetic_points_stay_clear_of_the_clipping():
    metrics = [o.metric for t in synthetic_tasks() for o in t.observations]
    assert len(metrics) == 3 * 80 and 0.01 < min(metrics) and max(metrics) < 0.99


def test_fit_recovers_the_parameters_exactly_without_noise():
    f = fit(synthetic_tasks(), metric="accuracy")
    assert f.fixed == ()
    assert f.a == pytest.approx(A, abs=1e-9)
    assert f.b == pytest.approx((*B, 0.0), abs=1e-9) and f.b[2] == 0.0
    assert f.c == pytest.approx(C, abs=1e-9)
    assert f.r2_logit == pytest.approx(1.0, abs=1e-12) and f.mse_logit < 1e-20
    assert f.r2_metric == pytest.approx(1.0, abs=1e-12) and f.mse_metric < 1e-20
    assert f.n_points == 240


def test_fit_recovers_the_parameters_under_small_noise():
    f = fit(synthetic_tasks(noise=0.05, seed=1), metric="accuracy")
    assert f.a == pytest.approx(A, abs=0.02)
    assert f.b[:2] == pytest.approx(B, abs=0.08)
    assert f.c == pytest.approx(C, abs=0.03)
    assert 0.95 < f.r2_logit < 1.0
    assert f.mse_logit == pytest.approx(0.05**2, rel=0.3)  # the noise variance


def test_predict_is_the_models_equation():
    f = fit(synthetic_tasks(), metric="accuracy")
    config, i = Config("iterdrag", 20, 8, 4), Informativeness(0.1, 0.4)  # a point outside the fitted grid
    assert f.predict_logit(config, i) == pytest.approx(true_logit(config, i), abs=1e-9)
    assert f.predict(config, i) == pytest.approx(sigmoid(true_logit(config, i)), abs=1e-9)


def test_a_single_drag_task_holds_the_unidentifiable_parameters_at_zero():
    # With one task, b*i is a multiple of a; with n = 1 everywhere, a3*log(1.01) is a constant.
    i = Informativeness(0.2, 0.1)
    configs = default_grid(["zero-shot", "rag", "drag"], documents=(0, 1, 2, 5), shots=(0, 1, 2, 4))
    task = Task("one", "drag", i, tuple(Observation(c, sigmoid(true_logit(c, i)), 1.0) for c in configs))
    f = fit([task], metric="em")
    assert f.fixed == ("a3", "b1", "b2")
    assert f.a == pytest.approx((0.30 + 0.8 * 0.2, 0.10 - 0.5 * 0.1, 0.0), abs=1e-9)  # (0.46, 0.05, 0)
    assert f.b == (0.0, 0.0, 0.0)
    assert f.c == pytest.approx(-0.5 + 0.18 * math.log(1.01), abs=1e-9)


def test_too_few_points_says_how_many_are_needed():
    three = synthetic_tasks()
    six = [Task(t.name, t.method, t.i, t.observations[:2]) for t in three]  # 6 points, 6 free parameters
    with pytest.raises(ConfigError, match=r"at least 7 .* 6 free parameters .* got 6"):
        fit(six, metric="accuracy")
    base = [Observation(Config("zero-shot", 0, 0), 0.2, 1), Observation(Config("rag", 1, 0), 0.3, 2),
            Observation(Config("drag", 0, 1), 0.25, 2)]
    with pytest.raises(ConfigError, match=r"at least 4 .* 3 free parameters \(a1, a2, c\).* got 3"):
        fit([Task("t", "drag", Informativeness(0.1, 0.05), tuple(base))], metric="accuracy")


def test_informativeness_from_the_base_configurations():
    obs = [Observation(Config("zero-shot", 0, 0), 0.20, 50), Observation(Config("rag", 1, 0), 0.50, 150),
           Observation(Config("drag", 0, 1), 0.30, 90), Observation(Config("drag", 5, 2), 0.70, 900)]
    i = informativeness(obs, "drag")
    assert i.doc == pytest.approx(0.30) and i.shot == pytest.approx(0.10)


def test_missing_base_configurations_are_named():
    obs = [Observation(Config("zero-shot", 0, 0), 0.2, 50), Observation(Config("drag", 5, 2), 0.7, 900)]
    with pytest.raises(ConfigError, match=r"hotpot lacks .*rag k=1 m=0 n=1, drag k=0 m=1 n=1"):
        informativeness(obs, "drag", task="hotpot")
    with pytest.raises(ConfigError, match=r"iterdrag k=0 m=0 n=1, iterdrag k=1 m=0 n=1, iterdrag k=0 m=1 n=1"):
        informativeness(obs, "iterdrag")


def test_fit_json_round_trip(tmp_path):
    f = fit(synthetic_tasks(noise=0.05), metric="f1")
    path = save_fit(f, tmp_path / "sub" / "fit.json")
    assert load_fit(path) == f


def test_load_fit_refuses_other_files(tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"a": [1, 2, 3]}')
    with pytest.raises(InputError, match="not an allocation fit"):
        load_fit(other)
    with pytest.raises(InputError, match="does not exist"):
        load_fit(tmp_path / "missing.json")


# A fit written down by hand: logit P = (0.5 + 1.0 * i_doc) log(k+ε) + 0.2 log(m+ε) + 0.1 log(n+ε) - 1.
HAND = AllocationFit(metric="accuracy", a=(0.5, 0.2, 0.1), b=(1.0, 0.0, 0.0), c=-1.0, fixed=(), r2_logit=None,
                     mse_logit=0.0, r2_metric=None, mse_metric=0.0, tasks=())
COSTS = {Config("zero-shot", 0, 0): 100, Config("rag", 5, 0): 1000, Config("rag", 10, 0): 2000,
         Config("drag", 2, 4): 1500}


def test_plan_picks_the_best_predicted_configuration_within_the_budget():
    i = {"drag": Informativeness(doc=0.5, shot=0.0)}  # so k's weight is 0.5 + 1.0 * 0.5 = 1.0
    # Within 1600: zero-shot (1.0 ln .01 + 0.2 ln .01 + 0.1 ln 1.01 - 1 = -6.525), rag k=5
    # (ln 5.01 + 0.2 ln .01 + 0.001 - 1 = -0.3087) and drag k=2 m=4 (ln 2.01 + 0.2 ln 4.01 + 0.001 - 1 = -0.0231).
    choice = rank(HAND, 1600, COSTS, COSTS.__getitem__, i)[0]
    assert choice.config == Config("drag", 2, 4)
    assert choice.predicted == pytest.approx(sigmoid(-0.0231), abs=1e-4)
    assert (choice.estimated_tokens, choice.budget, choice.considered) == (1500, 1600, 3)
    cheaper = rank(HAND, 1200, COSTS, COSTS.__getitem__, i)[0]
    assert cheaper.config == Config("rag", 5, 0) and cheaper.predicted == pytest.approx(sigmoid(-0.3087), abs=1e-4)


def test_plan_refuses_a_budget_below_every_candidate_and_missing_informativeness():
    i = {"drag": Informativeness(0.5, 0.0)}
    with pytest.raises(ConfigError, match=r"budget of 50 tokens .* smallest that fits is 100 tokens \(zero-shot"):
        rank(HAND, 50, COSTS, COSTS.__getitem__, i)
    with pytest.raises(ConfigError, match="no informativeness i for iterdrag"):
        rank(HAND, 5000, [*COSTS, Config("iterdrag", 1, 1, 2)], lambda c: 10, i)


# Per-dataset normalisation ---------------------------------------------------------------------------

BASES = (Config("zero-shot", 0, 0), Config("rag", 1, 0), Config("drag", 0, 1))
DRAG_CONFIGS = default_grid(["zero-shot", "rag", "drag"], documents=(0, 1, 2, 5), shots=(0, 1, 2, 4))


def test_dataset_scales_pool_a_datasets_methods_with_the_population_sd():
    i = Informativeness(0.1, 0.1)
    a = Task("a [drag]", "drag", i, tuple(Observation(c, m, 1.0) for c, m in zip(BASES, (0.1, 0.3, 0.5), strict=True)),
             dataset="a")
    b = Task("b [drag]", "drag", i, tuple(Observation(c, m, 1.0) for c, m in zip(BASES, (0.2, 0.2, 0.8), strict=True)),
             dataset="b")
    b_iter = Task("b [iterdrag]", "iterdrag", i, (Observation(Config("iterdrag", 5, 1, 2), 0.4, 1.0),), dataset="b")
    # a: mean 0.3, variance (0.2² + 0 + 0.2²) / 3; b: 0.2, 0.2, 0.8, 0.4 -> mean 0.4, variance 0.24 / 4.
    assert dataset_scales([a, b, b_iter]) == (DatasetScale("a", pytest.approx(0.3), pytest.approx(math.sqrt(0.08 / 3))),
                                              DatasetScale("b", pytest.approx(0.4), pytest.approx(math.sqrt(0.06))))
    assert Task("c", "drag", i, ()).dataset == "c"  # a task of its own dataset unless told
    flat = Task("flat", "drag", i, tuple(Observation(c, 0.2, 1.0) for c in DRAG_CONFIGS))
    with pytest.raises(ConfigError, match="flat: every configuration scores 0.2, so its metric cannot be normalised"):
        fit([flat], metric="em", normalize="dataset")
    with pytest.raises(ConfigError, match="unknown normalize 'z'; valid: none, dataset"):
        fit([a], metric="em", normalize="z")


LN3 = math.log(3)


def two_scales():
    """One truth on two datasets of different scale: P_a = 0.1 + 0.2 g, P_b = 0.5 + 0.4 g, g = σ(x). x is the
    model's logit rescaled to span [−ln 3, ln 3], so g spans [0.25, 0.75]: the z-scores' sigmoid then has its
    asymptotes half the z range beyond each end (margins 0.5, on the searched grid)."""
    i = Informativeness(0.2, 0.1)
    x0 = {c: true_logit(c, i) for c in DRAG_CONFIGS}
    low, high = min(x0.values()), max(x0.values())
    scale = 2 * LN3 / (high - low)

    def x(config):
        return -LN3 + scale * (true_logit(config, i) - low)

    g = np.array([sigmoid(x(c)) for c in DRAG_CONFIGS])
    tasks = [Task(f"{d} [drag]", "drag", i, tuple(Observation(c, base + width * v, 100.0)
                                                  for c, v in zip(DRAG_CONFIGS, g, strict=True)), dataset=d)
             for d, base, width in (("a", 0.1, 0.2), ("b", 0.5, 0.4))]
    return tasks, i, x, scale, low, g


def test_dataset_normalisation_fits_one_sigmoid_to_both_scales():
    tasks, i, x, scale, low, g = two_scales()
    f = fit(tasks, metric="f1", normalize="dataset")
    assert f.normalize == "dataset" and f.unit == "f1 z-score" and f.fixed == ("a3", "b1", "b2")
    # z of either dataset is (g − mean g) / sd g, so σ(x) = (σ_std(x) − mean g) / sd g: L = −ḡ/s, U = (1 − ḡ)/s.
    mean, sd = g.mean(), g.std()
    assert f.sigmoid == pytest.approx((-mean / sd, (1 - mean) / sd), abs=1e-9)
    assert [(s.dataset, s.mean, s.std) for s in f.scales] == [
        ("a", pytest.approx(0.1 + 0.2 * mean), pytest.approx(0.2 * sd)),
        ("b", pytest.approx(0.5 + 0.4 * mean), pytest.approx(0.4 * sd))]
    # The fitted linear part is the truth's, rescaled: a₁ = scale · (0.30 + 0.8 · 0.2), a₂ = scale · (0.10 − 0.5 · 0.1).
    assert f.a == pytest.approx((scale * 0.46, scale * 0.05, 0.0), abs=1e-9)
    assert f.c == pytest.approx(scale * (C + 0.18 * math.log(1.01) - low) - LN3, abs=1e-9)
    assert f.r2_logit == pytest.approx(1.0, abs=1e-12) and f.mse_metric < 1e-20
    outside = Config("drag", 20, 8)  # never fitted
    assert f.predict(outside, i) == pytest.approx((sigmoid(x(outside)) - mean) / sd, abs=1e-9)
    assert f.predict_metric(outside, i, "b") == pytest.approx(0.5 + 0.4 * sigmoid(x(outside)), abs=1e-9)
    with pytest.raises(ConfigError, match="'c' is not one of the fitted datasets \\(a, b\\)"):
        f.predict_metric(outside, i, "c")
    # The proportion itself cannot follow both scales with one curve.
    assert fit(tasks, metric="f1").r2_metric < 0.9


def test_normalised_fit_json_round_trip_and_old_files(tmp_path):
    tasks = two_scales()[0]
    f = fit(tasks, metric="f1", normalize="dataset")
    data = json.loads(save_fit(f, tmp_path / "fit.json").read_text())
    assert data["normalize"] == "dataset" and data["format"] == "ragfunnel.allocation-fit/2"
    assert [d["name"] for d in data["datasets"]] == ["a", "b"] and data["tasks"][1]["dataset"] == "b"
    assert load_fit(tmp_path / "fit.json") == f
    plain = fit(synthetic_tasks(), metric="f1")
    old = plain.to_json()
    for key in ("normalize", "sigmoid", "datasets"):
        del old[key]
    for t in old["tasks"]:
        del t["dataset"]
    (tmp_path / "old.json").write_text(json.dumps(old | {"format": "ragfunnel.allocation-fit/1"}))
    assert load_fit(tmp_path / "old.json") == plain


def summary(config, metric, tokens):
    return ConfigSummary(config, 10, 0, metric, 0.0, 0.0, tokens, round(tokens), 1.0)


def test_tasks_from_summaries_leave_out_a_method_without_base_configurations(caplog):
    rows = [summary(c, 0.1 * j, 100.0 * (j + 1)) for j, c in enumerate(BASES)]
    rows.append(summary(Config("iterdrag", 0, 0, 1), 0.2, 400.0))
    with caplog.at_level(logging.WARNING):
        tasks = tasks_from_summaries("hotpot", rows, "accuracy")
    assert [(t.name, t.dataset, t.method) for t in tasks] == [("hotpot [drag]", "hotpot", "drag")]
    assert "hotpot [iterdrag] lacks the base configuration(s) iterdrag k=1 m=0 n=1" in caplog.text
    with pytest.raises(ConfigError, match=r"hotpot \[drag\] lacks the base configuration\(s\) rag k=1"):
        tasks_from_summaries("hotpot", [rows[0], rows[2]], "accuracy")


# Token costs and the planner over configurations never run ------------------------------------------


def test_token_costs_estimate_unrun_configurations_from_made_up_means():
    drag = TokenCosts("drag", base=100, per_document=50, per_shot=20)
    assert drag.estimate(Config("drag", 10, 4)) == 2680  # 100 + 50·10·(4+1) + 20·4: each shot has its 10 documents
    assert drag.estimate(Config("rag", 3, 0)) == 250  # 100 + 50·3
    iterdrag = TokenCosts("iterdrag", base=400, per_document=60, per_shot=150, per_iteration=300)
    assert iterdrag.estimate(Config("iterdrag", 5, 2, 3)) == 2200  # 400 + 60·5·3 + 150·2 + 300·(3−1)
    with pytest.raises(ConfigError, match="these token costs are drag's; iterdrag k=5 m=2 n=3 is run by iterdrag"):
        drag.estimate(Config("iterdrag", 5, 2, 3))
    one_n = TokenCosts("iterdrag", 400, 60, 150, per_iteration=None)
    assert one_n.estimate(Config("iterdrag", 5, 2, 1)) == 1600
    with pytest.raises(ConfigError, match="iterdrag k=5 m=2 n=3: no measured iterdrag configuration shows its "
                                          "per_iteration cost"):
        one_n.estimate(Config("iterdrag", 5, 2, 3))


def test_token_costs_are_recovered_from_measured_configurations():
    truth = TokenCosts("iterdrag", 400, 60, 150, 300)
    configs = default_grid(["iterdrag"], documents=(0, 1, 5), shots=(0, 1, 2), iterations=(1, 2))
    obs = [Observation(c, 0.5, truth.estimate(c)) for c in configs] + [Observation(BASES[0], 0.1, 9999.0)]
    got = token_costs(obs, "iterdrag")  # the DRAG observation is not IterDRAG's
    assert (got.base, got.per_document, got.per_shot, got.per_iteration) == pytest.approx((400, 60, 150, 300))
    assert token_costs([o for o in obs if o.config.iterations == 1], "iterdrag").per_iteration is None
    drag = token_costs([Observation(c, 0.1, t) for c, t in zip(BASES, (100, 150, 120), strict=True)], "drag")
    assert (drag.base, drag.per_document, drag.per_shot, drag.per_iteration) == pytest.approx((100, 50, 20, 0))
    # Demonstrations that seem to shorten the prompt: the cost is held at 0, never negative.
    shrinking = token_costs([Observation(c, 0.1, t) for c, t in zip(
        [*BASES, Config("drag", 1, 1), Config("rag", 5, 0)], (100, 150, 90, 180, 350), strict=True)], "drag")
    assert shrinking.per_shot == 0.0 and shrinking.base > 0 and shrinking.per_document > 0
    with pytest.raises(ConfigError, match="do not pin down its per-document, per-shot and per-iteration"):
        token_costs([Observation(BASES[0], 0.1, 100), Observation(Config("drag", 1, 1), 0.1, 300)], "drag")
    with pytest.raises(ConfigError, match="no measured iterdrag configuration"):
        token_costs([Observation(BASES[0], 0.1, 100)], "iterdrag")


def test_candidate_space_enumerates_each_methods_configurations():
    space = candidate_space(["iterdrag", "drag"], documents=(0, 1), shots=(0, 1), iterations=(1, 2))
    assert space[:3] == [Config("zero-shot", 0, 0), Config("iterdrag", 0, 0, 1), Config("iterdrag", 0, 0, 2)]
    assert len(space) == 4 + 8 and Config("drag", 1, 1) in space and Config("iterdrag", 1, 1, 2) in space
    assert candidate_space(["drag"], documents=(2,), shots=(4,)) == [Config("drag", 2, 4)]
    with pytest.raises(ConfigError, match="unknown method 'rag'; valid methods: drag, iterdrag"):
        candidate_space(["rag"])


def test_the_planner_proposes_an_unrun_configuration_it_predicts_best():
    i = {"drag": Informativeness(doc=0.5, shot=0.0)}
    measured = {Config("zero-shot", 0, 0): 100.0, Config("rag", 5, 0): 500.0}
    tokens = TokenEstimator(measured, {"drag": TokenCosts("drag", 100, 50, 20)},
                            elsewhere={Config("rag", 10, 0): 1800.0})
    unrun = Config("drag", 2, 4)
    assert [tokens.source(c) for c in (*measured, unrun)] == ["task", "task", "costs"]
    assert tokens(unrun) == 680  # 100 + 50·2·(4+1) + 20·4
    candidates = [*measured, *candidate_space(["drag"], documents=(2,), shots=(4,))]
    # Logits as in the test above: drag k=2 m=4 −0.0231 > rag k=5 −0.3087 > zero-shot −6.525.
    choice = rank(HAND, 1000, candidates, tokens, i, ran=measured)[0]
    assert (choice.config, choice.never_run, choice.estimated_tokens) == (unrun, True, 680)
    assert choice.predicted == pytest.approx(sigmoid(-0.0231), abs=1e-4)
    ranked = rank(HAND, 1000, candidates, tokens, i, ran=measured)
    assert [(p.config.label, p.never_run) for p in ranked] == [
        ("drag k=2 m=4 n=1", True), ("rag k=5 m=0 n=1", False), ("zero-shot k=0 m=0 n=1", False)]
    cheaper = rank(HAND, 600, candidates, tokens, i, ran=measured)[0]  # 680 tokens no longer fit
    assert (cheaper.config, cheaper.never_run, cheaper.considered) == (Config("rag", 5, 0), False, 2)
    assert not rank(HAND, 1000, candidates, tokens, i)[0].never_run  # no `ran`: the caller's candidates all ran


def test_token_estimator_falls_back_to_other_grids_then_refuses():
    tokens = TokenEstimator({}, {"iterdrag": TokenCosts("iterdrag", 400, 60, 150, None)},
                            elsewhere={Config("iterdrag", 1, 1, 3): 2500.4})
    assert tokens.source(Config("iterdrag", 1, 1, 3)) == "fit" and tokens(Config("iterdrag", 1, 1, 3)) == 2501
    assert tokens.source(Config("iterdrag", 1, 1, 1)) == "costs"
    assert tokens.source(Config("iterdrag", 1, 1, 2)) is None and tokens.source(Config("rag", 1, 0)) is None
    with pytest.raises(ConfigError, match="no token count for rag k=1 m=0 n=1"):
        tokens(Config("rag", 1, 0))


# Leave one dataset out ------------------------------------------------------------------------------

LOO_CONFIGS = [Config("zero-shot", 0, 0), *(Config("rag", k, 0) for k in (1, 2, 5, 10)),
               *(Config("drag", k, 1) for k in (0, 1, 2, 5))]


def loo_tokens(config):
    k, m, _ = config.theta
    return 100 + 100 * k * (m + 1) + 50 * m


def loo_grid(base, gain):
    """More documents help (log-like), a demonstration costs 0.05: the best within a budget is the RAG with
    the most documents that fits."""
    return [summary(c, base + gain * math.log(c.documents + 1) / math.log(11) - 0.05 * c.shots, loo_tokens(c))
            for c in LOO_CONFIGS]


def test_spearman_ranks_with_ties():
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 2, 2, 3]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [5, 5, 5]) is None and spearman([1], [2]) is None


@pytest.mark.parametrize("normalize", ["none", "dataset"])
def test_leave_one_dataset_out_on_three_synthetic_datasets(normalize):
    grids = {"a": loo_grid(0.1, 0.4), "b": loo_grid(0.2, 0.3), "c": loo_grid(0.05, 0.5)}
    result = leave_one_dataset_out(grids, [50, 300, 700, 1200, 2500], metric="accuracy", normalize=normalize)
    assert [d.dataset for d in result.datasets] == ["a", "b", "c"]
    for d in result.datasets:  # each fit saw the other two datasets only
        assert sorted({t.dataset for t in d.fit.tasks}) == sorted(set(grids) - {d.dataset})
        assert d.fit.normalize == normalize and d.baseline_shots == 1 and d.rank_correlation > 0.8
        assert d.notes == ("budget 50: no configuration fits (the cheapest is 100 tokens)",)
    a = result.datasets[0]
    assert a.i["drag"] == Informativeness(pytest.approx(0.4 * math.log(2) / math.log(11)), pytest.approx(-0.05))

    def metric(k, m):
        return 0.1 + 0.4 * math.log(k + 1) / math.log(11) - 0.05 * m

    # Tokens: RAG k=2 300, k=5 600, k=10 1100; DRAG (m=1) k=0 150, k=2 550, k=5 1150.
    expected = [(300, Config("rag", 2, 0), Config("drag", 0, 1)), (700, Config("rag", 5, 0), Config("drag", 2, 1)),
                (1200, Config("rag", 10, 0), Config("drag", 5, 1)), (2500, Config("rag", 10, 0), Config("drag", 5, 1))]
    for cell, (budget, best, baseline) in zip(a.budgets, expected, strict=True):
        assert (cell.budget, cell.chosen.config, cell.oracle.config, cell.baseline.config) == (
            budget, best, best, baseline)
        assert cell.oracle.metric == pytest.approx(metric(best.documents, 0))
        assert cell.baseline.metric == pytest.approx(metric(baseline.documents, 1))
        assert cell.oracle.tokens == loo_tokens(best)
    s = result.summary
    assert (s.cells, s.matches, s.baseline_cells) == (12, 12, 12) and s.ratio == pytest.approx(1.0)
    assert s.baseline < s.chosen == pytest.approx(s.oracle)
    data = json.loads(json.dumps(result.to_json()))
    assert data["normalize"] == normalize and data["summary"]["matches"] == 12
    assert data["datasets"][0]["budgets"][0]["chosen"] == {"strategy": "rag", "k": 2, "m": 0, "n": 1,
                                                           "metric": pytest.approx(metric(2, 0)), "tokens": 300.0}
    assert data["datasets"][0]["fit"]["trained_on"] == ["b", "c"]


def test_leave_one_dataset_out_refuses_bad_input():
    with pytest.raises(ConfigError, match=r"needs grid runs of at least 2 datasets, got 1 \(a\)"):
        leave_one_dataset_out({"a": loo_grid(0.1, 0.4)}, [1000], metric="accuracy")
    with pytest.raises(ConfigError, match="no token budgets"):
        leave_one_dataset_out({"a": loo_grid(0.1, 0.4), "b": loo_grid(0.2, 0.3)}, [], metric="accuracy")
    with pytest.raises(ConfigError, match="baseline's shots must be >= 1"):
        leave_one_dataset_out({"a": [], "b": []}, [1000], metric="accuracy", baseline_shots=0)
    no_base = [s for s in loo_grid(0.1, 0.4) if s.config != Config("rag", 1, 0)]
    with pytest.raises(ConfigError, match=r"c \[drag\] lacks the base configuration\(s\) rag k=1"):
        leave_one_dataset_out({"a": loo_grid(0.1, 0.4), "b": loo_grid(0.2, 0.3), "c": no_base}, [1000],
                              metric="accuracy")
    with pytest.raises(ConfigError, match="fitting without b: .*every configuration scores 0.3"):
        leave_one_dataset_out({"a": [summary(c, 0.3, loo_tokens(c)) for c in LOO_CONFIGS], "b": loo_grid(0.2, 0.3)},
                              [1000], metric="accuracy", normalize="dataset")
