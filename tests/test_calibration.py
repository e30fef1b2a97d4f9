"""Confidence measures against hand-computed cases, the logistic calibration and the `calibrate` command."""

import json
import logging
import math

import numpy as np
import pytest
from click.testing import CliRunner

from ragfunnel.cli.calibrate import calibrate
from ragfunnel.confidence import calibration
from ragfunnel.confidence.calibration import CalibrationFile, Calibrator, check_fingerprints, load_calibration
from ragfunnel.confidence.fitting import cross_validate, fit_calibration, fit_logistic
from ragfunnel.confidence.measures import (
    ReliabilityBin,
    auroc,
    average_ranks,
    coverage_curve,
    expected_calibration_error,
    is_right,
    reliability_bins,
)
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.eval.runner import EvalRow, run_eval
from ragfunnel.journal import CONFIG_FILE, ROWS_FILE
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.types import Example

STRONG, LIGHT = "a" * 64, "b" * 64


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


# --- measures -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("metrics", "verdict"), [
    ({"f1": 0.5, "em": 0.0, "accuracy": 0.0}, True),  # F1 decides short answers, at 0.5 inclusive
    ({"f1": 0.49, "em": 0.0, "accuracy": 1.0}, False),  # ... even where the answer contains the reference
    ({"longbench": 0.7}, True),
    ({"longbench": 0.2, "accuracy": 1.0}, False),
    ({"accuracy": 1.0}, True),  # choice tasks
    ({"accuracy": 0.0}, False),
    ({"rouge_l": 0.9}, None),  # summaries: no right or wrong
    ({}, None),  # a failed row
])
def test_is_right_follows_the_tasks_own_metric(metrics, verdict):
    assert is_right(metrics) is verdict


def test_average_ranks_share_ties():
    assert average_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]
    assert average_ranks(np.array([5.0, 5.0, 5.0])).tolist() == [2.0, 2.0, 2.0]


def test_auroc_by_hand():
    # Right scores 0.35 and 0.8 against wrong 0.1 and 0.4: 0.35 beats 0.1, loses to 0.4; 0.8 beats both.
    assert auroc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == pytest.approx(3 / 4)
    # A tie between a right and a wrong answer counts half: (1 + 0.5 + 1 + 1) / 4.
    assert auroc([0.2, 0.5, 0.5, 0.9], [0, 1, 0, 1]) == pytest.approx(3.5 / 4)
    assert auroc([1, 1, 1, 1], [0, 1, 0, 1]) == 0.5
    assert auroc([0.1, 0.2, 0.9], [0, 1, 1]) == 1.0
    assert auroc([0.9, 0.2, 0.1], [0, 1, 1]) == 0.0


def test_auroc_needs_both_classes_and_matching_lengths():
    with pytest.raises(InputError, match="all 3 are right"):
        auroc([0.1, 0.2, 0.3], [True, True, True])
    with pytest.raises(InputError, match="all 2 are wrong"):
        auroc([0.1, 0.2], [0, 0])
    with pytest.raises(InputError, match="differ in length"):
        auroc([0.1, 0.2], [0, 1, 1])
    with pytest.raises(InputError, match="not a finite number"):
        auroc([0.1, float("nan")], [0, 1])
    with pytest.raises(InputError, match="scores must be numbers"):
        auroc([0.1, "high"], [0, 1])


def test_reliability_bins_and_ece_by_hand():
    probs, right = [0.9, 0.9, 0.1, 0.35], [True, False, False, True]
    bins = reliability_bins(probs, right)
    assert [(b.low, b.high, b.n) for b in bins] == [(0.1, 0.2, 1), (0.3, 0.4, 1), (0.9, 1.0, 2)]  # empty ones left out
    assert [b.mean_confidence for b in bins] == pytest.approx([0.1, 0.35, 0.9])
    assert [b.share_right for b in bins] == [0.0, 1.0, 0.5]
    # Gaps 0.1, 0.65 and 0.4 weighted by 1, 1 and 2 answers of 4.
    assert expected_calibration_error(probs, right) == pytest.approx((0.1 + 0.65 + 2 * 0.4) / 4)


def test_bins_are_half_open_with_one_in_the_last():
    assert reliability_bins([0.0, 0.5, 1.0], [0, 1, 1], bins=2) == [
        ReliabilityBin(0.0, 0.5, 0.0, 0.0, 1), ReliabilityBin(0.5, 1.0, 0.75, 1.0, 2)]
    assert expected_calibration_error([0.0, 0.5, 1.0], [0, 1, 1], bins=2) == pytest.approx(2 * 0.25 / 3)
    assert expected_calibration_error([1.0, 0.0], [1, 0]) == 0.0


def test_calibration_measures_refuse_what_is_not_a_probability():
    with pytest.raises(InputError, match=r"must lie in \[0, 1\]; got -0.1 to 0.5"):
        expected_calibration_error([-0.1, 0.5], [0, 1])
    with pytest.raises(InputError, match="bins must be at least 1"):
        reliability_bins([0.5], [1], bins=0)
    with pytest.raises(InputError, match="True/False"):
        reliability_bins([0.5, 0.2], [2, 0])


def test_coverage_curve_by_hand():
    # Most confident first, the two 0.9s in their given order: qualities 0.0, 0.5, 1.0, 1.0.
    curve = coverage_curve([0.2, 0.9, 0.5, 0.9], [1.0, 0.0, 1.0, 0.5])
    assert curve == [(0.25, 0.0), (0.5, 0.25), (0.75, 0.5), (1.0, 0.625)]  # exact in binary
    with pytest.raises(InputError, match="differ in length"):
        coverage_curve([0.2, 0.9], [1.0])


# --- the calibrator -------------------------------------------------------------------------------------------


def hand_calibrator(**changes):
    fields = {"method": "fb", "features": ("a", "b"), "means": (1.0, 10.0), "scales": (2.0, 5.0),
              "weights": (1.0, -0.5), "bias": 0.2} | changes
    return Calibrator(**fields)


def test_predict_is_the_logistic_of_the_standardised_signals():
    model = hand_calibrator()
    # z = ((3 - 1) / 2, (20 - 10) / 5) = (1, 2): 0.2 + 1 - 1 = 0.2.
    assert model.predict({"a": 3.0, "b": 20.0}) == pytest.approx(sigmoid(0.2))
    # A missing, None, NaN or infinite signal is its training mean: b moves nothing, 0.2 + 1 = 1.2.
    for b in ({}, {"b": None}, {"b": float("nan")}, {"b": float("inf")}, {"b": 10.0}):
        assert model.predict({"a": 3.0} | b) == pytest.approx(sigmoid(1.2))
    assert model.predict({}) == pytest.approx(sigmoid(0.2))
    assert model.predict({"a": 3.0, "extra": 99.0}) == pytest.approx(sigmoid(1.2))  # unknown signals ignored


def test_predict_never_claims_certainty():
    model = hand_calibrator(weights=(50.0, 0.0))
    assert model.predict({"a": 100.0}) == 0.99
    assert model.predict({"a": -100.0}) == 0.01


def test_a_calibrator_with_mismatched_parts_is_refused():
    with pytest.raises(InputError, match="2 features but 1 means"):
        hand_calibrator(means=(1.0,))
    with pytest.raises(InputError, match="scale <= 0"):
        hand_calibrator(scales=(0.0, 1.0))


def noisy_rows(n, seed=0):
    """x informative (true logit 2x - 0.5), noise not; about a tenth of the rows lack x's companion."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    right = rng.random(n) < 1 / (1 + np.exp(-(2 * x - 0.5)))
    signals = [{"x": float(v), "noise": float(rng.normal())} for v in x]
    return signals, [bool(r) for r in right]


def test_logistic_fit_recovers_a_noisy_relation():
    signals, right = noisy_rows(4000)
    model = fit_logistic(signals, right, l2=1.0)
    assert model.features == ("noise", "x")
    # Back on the signals' own scale: weight / scale, bias - weight * mean / scale.
    slope = model.weights[1] / model.scales[1]
    intercept = model.bias - sum(w * m / s for w, m, s in zip(model.weights, model.means, model.scales, strict=True))
    assert slope == pytest.approx(2.0, abs=0.15)
    assert intercept == pytest.approx(-0.5, abs=0.15)
    assert abs(model.weights[0]) < 0.1
    grid = [model.predict({"x": v, "noise": 0.0}) for v in np.linspace(-2, 2, 9)]
    assert all(a < b for a, b in zip(grid, grid[1:], strict=False))  # monotone in the informative signal


def test_logistic_fit_is_the_penalised_optimum():
    signals, right = noisy_rows(300, seed=3)
    model = fit_logistic(signals, right, l2=2.0)
    z = np.array([[(s[f] - m) / sc for f, m, sc in zip(model.features, model.means, model.scales, strict=True)]
                  for s in signals])
    p = 1 / (1 + np.exp(-(z @ np.array(model.weights) + model.bias)))
    residual = p - np.array(right, dtype=float)
    assert np.abs(z.T @ residual + 2.0 * np.array(model.weights)).max() < 1e-6  # gradient 0 with the penalty
    assert abs(residual.sum()) < 1e-6  # the bias is not penalised


def test_logistic_fit_stays_finite_on_separable_rows():
    xs = np.linspace(-3, 3, 40)
    model = fit_logistic([{"x": float(v)} for v in xs], [bool(v > 0) for v in xs])
    assert all(math.isfinite(w) for w in model.weights)
    grid = [model.predict({"x": float(v)}) for v in xs]
    assert all(a <= b for a, b in zip(grid, grid[1:], strict=False))
    assert grid[0] < 0.1 and grid[-1] > 0.9


def test_logistic_fit_uses_signals_present_in_half_the_rows():
    rows = [{"a": float(i % 7), **({"b": float(i % 3)} if i < 20 else {}), **({"c": 1.0 * i} if i < 19 else {})}
            for i in range(40)]
    model = fit_logistic(rows, [i % 2 == 0 for i in range(40)])
    assert model.features == ("a", "b")  # b in 20 of 40 rows; c in 19
    assert model.means[1] == pytest.approx(np.mean([i % 3 for i in range(20)]))  # over the rows that have it


def test_logistic_fit_refuses_what_it_cannot_fit():
    with pytest.raises(InputError, match="both right and wrong answers; got 3 right of 3"):
        fit_logistic([{"x": 1.0}] * 3, [True] * 3)
    with pytest.raises(InputError, match="re-run eval with this version so rows carry signals"):
        fit_logistic([{}, {}, {"x": float("nan")}, {}], [True, False, True, False])
    with pytest.raises(ConfigError, match="l2 must be above 0"):
        fit_logistic([{"x": 1.0}, {"x": 0.0}], [True, False], l2=0.0)


# --- the calibration file ------------------------------------------------------------------------------------


def method_rows(method, n, seed):
    signals, right = noisy_rows(n, seed)
    return [(method, s, r) for s, r in zip(signals, right, strict=True)]


def fitted():
    rows = method_rows("fb", 60, 1) + method_rows("op", 20, 2)
    return fit_calibration(rows, fingerprints={"strong": STRONG, "light": LIGHT}, fitted_on="two runs (80 rows)")


def test_fit_calibration_fits_methods_with_enough_rows_and_a_default():
    cal = fitted()
    assert set(cal.models) == {"fb", "default"}  # op has 20 rows, under the 30 a model needs
    assert cal.n_rows == {"default": 80, "fb": 60}
    assert cal.fingerprints == {"strong": STRONG, "light": LIGHT}
    signals = {"x": 1.0, "noise": 0.0}
    assert cal.confidence("fb", signals) == cal.models["fb"].predict(signals)
    assert cal.confidence("auto:fb", signals) == cal.models["fb"].predict(signals)
    assert cal.confidence("op", signals) == cal.models["default"].predict(signals)
    assert cal.confidence("auto:lc", signals) == cal.models["default"].predict(signals)
    assert cal.models["fb"].method == "fb"
    # x predicts the verdict, so the cross-validated AUROC is well above a coin's.
    assert set(cal.held_out) == {"fb", "default"}
    assert cal.held_out["default"]["rows"] == 80.0
    assert cal.held_out["default"]["auroc"] > 0.7
    assert cal.earned("op") and not cal.earned("op", min_auroc=0.999)


def test_cross_validation_scores_rows_the_model_did_not_see():
    signals = [{"x": float(i)} for i in range(30)]
    assert cross_validate(signals, [i >= 15 for i in range(30)])["auroc"] > 0.99
    # Signals that are pure noise: fitted on its own rows a model seems to separate them; held out, it is a coin.
    rng = np.random.default_rng(5)
    noise = [{"a": float(rng.normal()), "b": float(rng.normal()), "c": float(rng.normal())} for _ in range(60)]
    right = [bool(rng.random() < 0.5) for _ in range(60)]
    in_sample = auroc([fit_logistic(noise, right).predict(s) for s in noise], right)
    held_out = cross_validate(noise, right)
    assert in_sample > 0.59 and held_out["auroc"] < 0.52 and held_out["rows"] == 60.0
    # One wrong answer: the fold that holds it out trains on right answers alone.
    assert cross_validate(signals, [i > 0 for i in range(30)]) is None


def test_an_empty_calibration_gives_no_confidence():
    empty = CalibrationFile()
    assert empty.confidence("fb", {"x": 1.0}) is None
    assert empty.model_for("fb") is None
    assert empty.earned("fb") is False


def test_json_round_trip(tmp_path):
    cal = fitted()
    assert CalibrationFile.from_json(json.loads(json.dumps(cal.to_json()))) == cal
    path = tmp_path / "cal.json"
    cal.save(path)
    assert CalibrationFile.read(path) == cal
    assert [p.name for p in tmp_path.iterdir()] == ["cal.json"]  # no partial file left behind
    assert json.loads(path.read_text())["version"] == 1


@pytest.mark.parametrize(("damage", "names"), [
    (lambda d: d.pop("fingerprints"), "'fingerprints' is missing"),
    (lambda d: d["models"]["fb"].update(weights="heavy"), "'models.fb.weights' is a str"),
    (lambda d: d["models"]["fb"].update(means=[1.0, "x"]), "'models.fb.means' must be a list of numbers"),
    (lambda d: d["models"]["fb"].pop("bias"), "'models.fb.bias' is missing"),
    (lambda d: d["models"]["fb"].update(weights=[1.0]), "'fb' has 2 features but 2 means, 2 scales and 1 weights"),
    (lambda d: d["models"].pop("default"), "no 'default' model"),
    (lambda d: d.update(version=2), "format version 2 is not one this ragfunnel reads"),
    (lambda d: d["n_rows"].update(fb="many"), "'n_rows' must map model names to row counts"),
    (lambda d: d.update(held_out={"fb": {"auroc": "high"}}), "'held_out' must map model names to objects of numbers"),
])
def test_a_damaged_file_names_its_bad_field(damage, names):
    data = fitted().to_json()
    damage(data)
    with pytest.raises(InputError, match=names):
        CalibrationFile.from_json(data)


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A shipped calibration in tmp_path, and no RAGFUNNEL_CALIBRATION."""
    path = tmp_path / "shipped.json"
    fitted().save(path)
    monkeypatch.setattr(calibration, "SHIPPED", path)
    monkeypatch.delenv("RAGFUNNEL_CALIBRATION", raising=False)
    return path


def test_the_shipped_file_lives_beside_the_module():
    assert calibration.SHIPPED.name == "calibration.json"
    assert calibration.SHIPPED.parent.name == "confidence"


def test_load_prefers_the_given_file_then_the_environment_then_the_shipped(shipped, tmp_path, monkeypatch):
    mine = tmp_path / "mine.json"
    ours = tmp_path / "ours.json"
    CalibrationFile(models=fitted().models, fitted_on="mine").save(mine)
    CalibrationFile(models=fitted().models, fitted_on="ours").save(ours)
    assert load_calibration().fitted_on == "two runs (80 rows)"
    monkeypatch.setenv("RAGFUNNEL_CALIBRATION", str(ours))
    assert load_calibration().fitted_on == "ours"
    assert load_calibration(mine).fitted_on == "mine"
    assert load_calibration(str(mine)).fitted_on == "mine"


@pytest.mark.parametrize(("content", "problem"), [
    (None, "does not exist"),
    (b"{\"version\": 1, \"mod", "is not JSON"),
    (b"[1, 2]", "a JSON object, not a list"),
    (b"{\"version\": 1}", "'models' is missing"),
])
def test_a_given_file_that_is_missing_or_damaged_warns_once_and_uses_the_shipped(shipped, tmp_path, caplog,
                                                                                 content, problem):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="ragfunnel.confidence.calibration"):
        cal = load_calibration(bad)
    assert cal == CalibrationFile.read(shipped)
    (record,) = caplog.records
    assert str(bad) in record.getMessage() and problem in record.getMessage()
    assert record.getMessage().endswith("; using the shipped calibration")


def test_a_damaged_environment_file_falls_back_too(shipped, tmp_path, caplog, monkeypatch):
    bad = tmp_path / "env.json"
    bad.write_text("not json")
    monkeypatch.setenv("RAGFUNNEL_CALIBRATION", str(bad))
    with caplog.at_level(logging.WARNING, logger="ragfunnel.confidence.calibration"):
        assert load_calibration().fitted_on == "two runs (80 rows)"
    assert len(caplog.records) == 1 and str(bad) in caplog.records[0].getMessage()


def test_without_a_shipped_file_there_is_no_confidence(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(calibration, "SHIPPED", tmp_path / "absent.json")
    monkeypatch.delenv("RAGFUNNEL_CALIBRATION", raising=False)
    with caplog.at_level(logging.WARNING, logger="ragfunnel.confidence.calibration"):
        assert load_calibration() == CalibrationFile()
    assert caplog.records == []
    with caplog.at_level(logging.WARNING, logger="ragfunnel.confidence.calibration"):
        cal = load_calibration(tmp_path / "missing.json")
    assert cal.confidence("fb", {"x": 1.0}) is None
    (record,) = caplog.records
    assert "missing.json does not exist; answers show no confidence" in record.getMessage()


def test_a_changed_model_is_warned_about_by_role(caplog):
    cal = CalibrationFile(fingerprints={"strong": STRONG, "light": LIGHT})
    with caplog.at_level(logging.WARNING, logger="ragfunnel.confidence.calibration"):
        check_fingerprints(cal, {"strong": "c" * 64, "light": LIGHT, "judge": "d" * 64})
    (record,) = caplog.records
    message = record.getMessage()
    assert message.startswith("the calibration was fitted with strong model weights aaaaaaaaaaaa, but the strong "
                              "model now has cccccccccccc;")
    assert STRONG not in message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ragfunnel.confidence.calibration"):
        check_fingerprints(cal, {"strong": STRONG})  # no light model now: nothing to compare
        check_fingerprints(CalibrationFile(), {"strong": STRONG})  # an older file recorded none
    assert caplog.records == []
    with caplog.at_level(logging.WARNING, logger="ragfunnel.confidence.calibration"):
        check_fingerprints(CalibrationFile(fingerprints={"light": "FakeLLM:small"}), {"light": "FakeLLM:tiny"})
    assert "weights FakeLLM:small, but the light model now has FakeLLM:tiny" in caplog.records[0].getMessage()


def test_the_same_changed_weights_are_warned_about_once_per_process(caplog):
    """A server answers many questions with one model: the warning is said once, not under every answer."""
    cal = CalibrationFile(fingerprints={"strong": "e" * 64})
    with caplog.at_level(logging.WARNING, logger="ragfunnel.confidence.calibration"):
        for _ in range(3):
            check_fingerprints(cal, {"strong": "f" * 64})
        check_fingerprints(cal, {"strong": "0" * 64})  # other weights: said again
    assert [r.getMessage().split(", but ")[1][:37] for r in caplog.records] == [
        "the strong model now has ffffffffffff", "the strong model now has 000000000000"]


def rows_of(n, right=lambda i: i % 2 == 0, signals=lambda i: {"x": float(i % 5)}):
    return [("fb", signals(i), right(i)) for i in range(n)]


@pytest.mark.parametrize(("rows", "message"), [
    ([], "no rows to fit on"),
    (rows_of(40, right=lambda i: None), "none of the 40 rows can be told right from wrong .* run eval on a dataset "
                                        "with reference answers"),
    (rows_of(40, signals=lambda i: {}), "none of the 40 rows carries confidence signals .* re-run eval with this "
                                        "version so rows carry signals"),
    (rows_of(29), r"only 29 of the 29 rows are usable \(0 without a right/wrong verdict, 0 without signals\); "
                  "calibration needs at least 30"),
    (rows_of(40, right=lambda i: None if i < 15 else True),
     r"only 25 of the 40 rows are usable \(15 without a right/wrong verdict"),
    (rows_of(40, right=lambda i: True), "every one of the 40 usable rows is right; .* harder questions"),
    (rows_of(40, right=lambda i: False), "every one of the 40 usable rows is wrong; .* easier questions"),
])
def test_fit_calibration_says_what_is_missing(rows, message):
    with pytest.raises(InputError, match=message) as caught:
        fit_calibration(rows, fingerprints={}, fitted_on="")
    assert "\n" not in str(caught.value)


# --- the calibrate command -----------------------------------------------------------------------------------


def eval_row(i, method, right, x, *, light=True, strong=STRONG):
    """A row as `ragfunnel eval` stores it: FB-RAG's drafting and answering stages name their weights."""
    stages = [{"name": "stage3_generate", "seconds": 0.5, "detail": {"model": "strong", "weights": strong}},
              {"name": "confidence", "seconds": 0.01, "detail": {"confidence": 0.5}}]
    if light:
        stages.insert(0, {"name": "stage2_forward", "seconds": 0.2, "detail": {"model": "light", "weights": LIGHT}})
    return EvalRow(example_id=str(i), method=method, question=f"q{i}", answer="a", references=["a"],
                   metrics={"f1": 1.0 if right else 0.0, "em": 0.0, "accuracy": 0.0},
                   trace={"seconds": 0.7, "input_tokens": 100, "stages": stages},
                   confidence=0.5, signals={"answer_logprob_mean": x, "draft_agreement": x / 2})


def write_run(path, rows):
    path.mkdir(parents=True)
    (path / CONFIG_FILE).write_text(json.dumps({"dataset": "qa.jsonl", "method_options": {}}))
    (path / ROWS_FILE).write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))


def two_runs(tmp_path):
    rng = np.random.default_rng(7)
    fb = [eval_row(i, "fb", (x := float(rng.normal())) + rng.normal() * 0.5 > 0, x) for i in range(40)]
    op = [eval_row(i, "op", (x := float(rng.normal())) > 0, x, light=False) for i in range(20)]
    write_run(tmp_path / "run1", fb[:25])
    write_run(tmp_path / "run2", fb[25:] + op)
    return tmp_path / "run1", tmp_path / "run2"


def test_calibrate_fits_prints_and_writes(tmp_path):
    run1, run2 = two_runs(tmp_path)
    out = tmp_path / "out" / "cal.json"
    result = CliRunner().invoke(calibrate, [str(run1), str(run2), "--out", str(out)])
    assert result.exit_code == 0, result.output
    cal = CalibrationFile.read(out)
    assert set(cal.models) == {"fb", "default"} and cal.n_rows == {"fb": 40, "default": 60}
    assert cal.fingerprints == {"strong": STRONG, "light": LIGHT}
    assert cal.fitted_on == f"{run1} (25 rows), {run2} (35 rows)"
    assert set(cal.models["fb"].features) == {"answer_logprob_mean", "draft_agreement"}
    lines = result.output.splitlines()
    assert lines[0].split() == ["method", "rows", "right", "AUROC", "ECE", "held-out", "AUROC", "model"]
    fb_line, op_line, all_line = lines[1].split(), lines[2].split(), lines[3].split()
    assert fb_line[:2] == ["fb", "40"] and fb_line[-2:] == ["its", "own"]
    assert op_line[:2] == ["op", "20"] and op_line[6] == "default"
    assert all_line[:2] == ["(all)", "60"]
    right = [r for r in (tmp_path / "run1" / ROWS_FILE).read_text().splitlines() + (tmp_path / "run2" / ROWS_FILE)
             .read_text().splitlines() if json.loads(r)["method"] == "fb" and json.loads(r)["metrics"]["f1"] == 1.0]
    assert float(fb_line[2]) == pytest.approx(len(right) / 40, abs=0.005)
    assert 0.7 < float(fb_line[3]) <= 1.0  # the signal predicts the verdict
    assert float(op_line[3]) > 0.9  # op's verdict is the signal's sign
    assert lines[-1] == f"wrote {out}; answers use it with --calibration {out} or RAGFUNNEL_CALIBRATION={out}"


def test_calibrate_refuses_runs_of_different_strong_models(tmp_path):
    write_run(tmp_path / "run1", [eval_row(i, "fb", i % 2 == 0, float(i % 2)) for i in range(20)])
    write_run(tmp_path / "run2", [eval_row(i, "fb", i % 2 == 0, float(i % 2), strong="c" * 64) for i in range(20)])
    result = CliRunner().invoke(calibrate, [str(tmp_path / "run1"), str(tmp_path / "run2"), "--out",
                                            str(tmp_path / "cal.json")])
    assert result.exit_code == 1
    assert result.output.strip() == ("error: the runs' strong answers come from 2 different model weights "
                                     "(aaaaaaaaaaaa, cccccccccccc); calibrate on runs of one strong model, the one "
                                     "answers will use")
    assert not (tmp_path / "cal.json").exists()


def test_calibrate_on_rows_without_signals_says_to_rerun_eval(tmp_path):
    """Rows written by run_eval before methods recorded signals (the FakeLLM answers; no model)."""
    llm = FakeLLM(lambda prompt, i: "1932" if "opened in 1932" in prompt else "unknown")
    exs = [Example(id=str(i), question="When did the bridge open?", answers=["1932"],
                   context="The bridge opened in 1932." if i % 2 else "The bridge is old.") for i in range(32)]
    run_eval(exs, {"lc": make_method("lc", strong=llm)}, tmp_path / "run", config={"dataset": "b.jsonl"},
             progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / ROWS_FILE).read_text().splitlines()]
    for row in rows:
        row["signals"] = {}
    (tmp_path / "run" / ROWS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(calibrate, [str(tmp_path / "run"), "--out", str(tmp_path / "cal.json")])
    assert result.exit_code == 1
    assert result.output.startswith("error: none of the 32 rows carries confidence signals")
    assert "re-run eval with this version so rows carry signals" in result.output
    # The same rows with signals: the strong model's fingerprint comes from the answering stage's trace.
    for i, row in enumerate(rows):
        row["signals"] = {"support": float(row["metrics"]["f1"] > 0) + 0.1 * (i % 3)}
    (tmp_path / "run" / ROWS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(calibrate, [str(tmp_path / "run"), "--out", str(tmp_path / "cal.json")])
    assert result.exit_code == 0, result.output
    assert CalibrationFile.read(tmp_path / "cal.json").fingerprints == {"strong": "FakeLLM:fake"}


def test_calibrate_on_a_non_run_directory(tmp_path):
    result = CliRunner().invoke(calibrate, [str(tmp_path), "--out", str(tmp_path / "cal.json")])
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and "is not a run directory" in result.output


def test_a_signal_fitted_against_its_known_direction_is_dropped():
    rng = np.random.default_rng(7)
    right = [bool(i % 2) for i in range(80)]
    # support rises with being right, as it should; judge_yes falls with it here (noise in these rows)
    signals = [{"support": float(r) + rng.normal(0, 0.5), "judge_yes": 1.0 - float(r) + rng.normal(0, 0.5)}
               for r in right]
    model = fit_logistic(signals, right)
    assert model.features == ("support",) and model.weights[0] > 0
    unknown = fit_logistic([{"support": s["support"], "made_up": s["judge_yes"]} for s in signals], right)
    assert set(unknown.features) == {"made_up", "support"}  # no known direction: kept as fitted
