"""The computation allocation model: fitting, identifiability, i from base configurations, JSON, planning."""

import math

import numpy as np
import pytest

from ragfunnel.errors import ConfigError, InputError
from ragfunnel.scaling.allocation import (
    AllocationFit,
    Informativeness,
    Observation,
    Task,
    fit,
    informativeness,
    load_fit,
    plan,
    save_fit,
)
from ragfunnel.scaling.grid import Config, default_grid

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
    choice = plan(HAND, 1600, COSTS, COSTS.__getitem__, i)
    assert choice.config == Config("drag", 2, 4)
    assert choice.predicted == pytest.approx(sigmoid(-0.0231), abs=1e-4)
    assert (choice.estimated_tokens, choice.budget, choice.considered) == (1500, 1600, 3)
    cheaper = plan(HAND, 1200, COSTS, COSTS.__getitem__, i)
    assert cheaper.config == Config("rag", 5, 0) and cheaper.predicted == pytest.approx(sigmoid(-0.3087), abs=1e-4)


def test_plan_refuses_a_budget_below_every_candidate_and_missing_informativeness():
    i = {"drag": Informativeness(0.5, 0.0)}
    with pytest.raises(ConfigError, match=r"budget of 50 tokens .* smallest that fits is 100 tokens \(zero-shot"):
        plan(HAND, 50, COSTS, COSTS.__getitem__, i)
    with pytest.raises(ConfigError, match="no informativeness i for iterdrag"):
        plan(HAND, 5000, [*COSTS, Config("iterdrag", 1, 1, 2)], lambda c: 10, i)
