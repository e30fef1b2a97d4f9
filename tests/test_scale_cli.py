"""`ragfunnel scale fit|summary|grid|demos|loo` and `ragfunnel plan` on grid runs of synthetic rows (no model)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from ragfunnel import __version__
from ragfunnel.cli.scale import plan, scale
from ragfunnel.errors import ConfigError
from ragfunnel.journal import VERSION_KEY
from ragfunnel.llm import FakeLLM
from ragfunnel.llm.registry import registered
from ragfunnel.scaling.grid import Config, default_grid
from ragfunnel.scaling.sizing import first_call_sizes
from ragfunnel.types import Prediction, Trace
from tests.helpers.runs import DRAG_GRID, f1_of, grid_inputs, write_run


def test_fit_prints_the_parameters_and_writes_json_and_png(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    run = write_run(tmp_path / "run", DRAG_GRID)
    result = CliRunner().invoke(scale, ["fit", str(run), "--metric", "f1"])
    assert result.exit_code == 0, result.output
    assert "20 points over 1 task(s)" in result.output
    assert "a = (0.4000, 0.1500, 0.0000)  b = (0.0000, 0.0000, 0)  c = -1.0000" in result.output
    assert "held at 0, not identifiable from these runs: a3, b1, b2" in result.output
    assert "logit space: R² 1.0000  MSE 0.0000" in result.output
    fit = json.loads((run / "allocation.json").read_text())
    assert fit["metric"] == "f1" and fit["n_points"] == 20 and fit["tasks"][0]["name"] == f"{run} [drag]"
    # i from the base configurations: F1(k=1, m=0) - F1(0, 0) and F1(0, 1) - F1(0, 0).
    zero = f1_of(Config("zero-shot", 0, 0))
    assert abs(fit["tasks"][0]["i_doc"] - (f1_of(Config("rag", 1, 0)) - zero)) < 1e-12
    assert abs(fit["tasks"][0]["i_shot"] - (f1_of(Config("drag", 0, 1)) - zero)) < 1e-12
    png = run / "allocation_predicted_vs_actual.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_plan_prints_the_predicted_best_theta(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    run = write_run(tmp_path / "run", DRAG_GRID)
    out = tmp_path / "fit.json"
    assert CliRunner().invoke(scale, ["fit", str(run), "--metric", "f1", "--out", str(out)]).exit_code == 0
    # Within 1,000 tokens: drag k=2 m=2 (800 tokens, F1 = σ(0.4 ln 2.01 + 0.15 ln 2.01 - 1) = 0.3507) beats
    # rag k=5 (600, 0.2600), drag k=1 m=4 (800, 0.3127) and drag k=2 m=1 (550, 0.3276).
    result = CliRunner().invoke(plan, ["--budget", "1k", "--fit", str(out), "--task", str(run)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("drag k=2 m=2 n=1: predicted f1 0.351 at ~800 tokens (measured on the task)")
    as_json = json.loads(CliRunner().invoke(plan, ["--budget", "1.2k", "--fit", str(out), "--task", str(run),
                                                   "--json"]).stdout)
    assert (as_json["strategy"], as_json["documents"], as_json["shots"], as_json["iterations"]) == ("drag", 5, 1, 1)
    assert abs(as_json["predicted"] - 0.4124) < 1e-4 and as_json["estimated_tokens"] == 1150
    assert as_json["tokens_from"] == "task" and as_json["considered"] == 14


def test_plan_on_a_budget_below_every_configuration_is_one_line(tmp_path):
    run = write_run(tmp_path / "run", DRAG_GRID)
    out = tmp_path / "fit.json"
    CliRunner().invoke(scale, ["fit", str(run), "--metric", "f1", "--out", str(out)])
    result = CliRunner().invoke(plan, ["--budget", "50", "--fit", str(out), "--task", str(run)])
    assert result.exit_code == 1
    assert result.output == ("error: a budget of 50 tokens is smaller than any configuration; the smallest that fits "
                             "is 100 tokens (zero-shot k=0 m=0 n=1)\n")


def test_summary_writes_the_optimal_table_and_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    run = write_run(tmp_path / "run", DRAG_GRID)
    result = CliRunner().invoke(scale, ["summary", str(run), "--metric", "f1"])
    assert result.exit_code == 0, result.output
    table = (run / "optimal.md").read_text()
    assert "| 1k | **best** (drag) | 2 | 2 | 1 | 800 | 0.000 | 0.351 | 0.000 |" in table
    assert "| 4k | rag | 10 | 0 | 1 | 1100 | 0.000 | 0.317 | 0.000 |" in table
    assert table in result.output
    assert (run / "quality_vs_context.png").stat().st_size > 5000


def test_fit_without_base_configurations_names_them(tmp_path):
    run = write_run(tmp_path / "run", [c for c in DRAG_GRID if c.theta != (1, 0, 1)])
    result = CliRunner().invoke(scale, ["fit", str(run)])
    assert result.exit_code == 1
    assert "error: " in result.output and "lacks the base configuration(s) rag k=1 m=0 n=1" in result.output


def test_fit_on_a_directory_that_is_no_grid_run(tmp_path):
    result = CliRunner().invoke(scale, ["fit", str(tmp_path)])
    assert result.exit_code == 1 and "is not a run directory" in result.output


class WordsMethod:
    """One call whose prompt holds 10 words per document per example (m demonstrations + the question)."""

    def __init__(self, config, llm):
        self.config, self.llm = config, llm

    def run(self, question):
        k, m, _ = self.config.theta
        prompt = " ".join(["doc"] * 10 * k * (m + 1) + question.split())
        self.llm.generate([prompt])
        return Prediction("x", "words", [], Trace())


def test_first_call_sizes_measure_the_methods_own_prompt_and_skip_what_cannot_fit():
    built = []

    def build(config, llm):
        built.append(config)
        if config.shots == 4:
            raise ConfigError("only 2 demonstrations for m=4")
        return WordsMethod(config, llm)

    configs = default_grid(["zero-shot", "rag", "drag"], documents=(0, 1, 5, 10), shots=(0, 1, 4))
    llm = FakeLLM(lambda prompt, i: "never called")
    sizes = first_call_sizes(configs, ["one two", "one two three four"], 100, build, llm)
    assert sizes[Config("zero-shot", 0, 0)] == 4  # the longer question
    assert sizes[Config("rag", 5, 0)] == 54 and sizes[Config("drag", 1, 1)] == 24
    assert sizes[Config("rag", 10, 0)] == 104  # over the limit, so k=10 with m=1 is not built ...
    assert Config("drag", 10, 1) not in built and sizes[Config("drag", 10, 1)] == 104  # ... and keeps this bound
    assert Config("drag", 5, 1) in built and sizes[Config("drag", 5, 1)] == 104
    # Refused configurations are left out, unless a smaller one already showed they cannot fit.
    assert Config("drag", 0, 4) not in sizes and Config("drag", 1, 4) not in sizes
    assert sizes[Config("drag", 5, 4)] == 104
    assert llm.calls == []  # the real model only counted tokens


def test_grid_runs_drag_and_iterdrag_then_summarises(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    pytest.importorskip("ragfunnel.methods.drag")  # the DRAG and IterDRAG classes the grid runs
    dataset, demos = grid_inputs(tmp_path)
    # Right exactly when the Paris document is in the prompt (k >= 1), in self-ask form so IterDRAG stops.
    fake = FakeLLM(lambda prompt, i: "So the final answer is: " + ("Paris" if "largest city" in prompt else "Lyon"))
    run = tmp_path / "run"
    args = ["grid", str(dataset), "--index", str(tmp_path / "ix"), "--out", str(run), "--budgets", "2k,4k",
            "--documents", "0,1,2", "--shots", "0,1", "--iterations", "1,2", "--demonstrations", str(demos),
            "--model", "fake:grid"]
    with registered("fake:grid", fake):
        result = CliRunner().invoke(scale, args)
    assert result.exit_code == 0, result.output
    lines = (run / "rows.jsonl").read_text().splitlines()
    assert len(lines) == (6 + 12) * 3  # 6 one-call and 12 IterDRAG configurations, 3 questions each
    assert len(fake.calls) == len(lines)  # sizing the configurations only counted tokens
    rows = [json.loads(x) for x in lines]
    assert all(r["metrics"]["accuracy"] == (1.0 if r["documents"] else 0.0) for r in rows)
    assert "| 2k | **best** (" in (run / "optimal.md").read_text() and (run / "quality_vs_context.png").exists()
    assert json.loads((run / "config.json").read_text())[VERSION_KEY] == __version__
    with registered("fake:grid", fake):
        again = CliRunner().invoke(scale, args)  # everything is done: nothing is answered twice
        assert again.exit_code == 0 and len(fake.calls) == len(lines)
        tiny = CliRunner().invoke(scale, [*args[:5], str(tmp_path / "run2"), "--budgets", "5", *args[8:]])
    assert tiny.exit_code == 1
    assert "a budget of 5 tokens is smaller than any configuration; the smallest that fits is" in tiny.output


def test_fit_with_dataset_normalisation_records_it(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    runs = [write_run(tmp_path / name, DRAG_GRID) for name in ("a", "b")]
    out = tmp_path / "fit.json"
    result = CliRunner().invoke(scale, ["fit", *map(str, runs), "--metric", "f1", "--normalize", "dataset",
                                        "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "40 points over 2 task(s)" in result.stdout and "σ⁻¹ space: R² " in result.stdout
    assert f"fitted to z-scores of f1 per dataset: {runs[0]} mean " in result.stdout
    fit = json.loads(out.read_text())
    assert fit["normalize"] == "dataset" and [d["name"] for d in fit["datasets"]] == [str(r) for r in runs]
    assert fit["sigmoid"]["lower"] < -1 < 1 < fit["sigmoid"]["upper"]  # z-scores of 20 points reach past ±1
    plan_out = CliRunner().invoke(plan, ["--budget", "1k", "--fit", str(out), "--task", str(runs[0])])
    assert plan_out.exit_code == 0, plan_out.output
    assert plan_out.stdout.startswith("drag k=2 m=2 n=1: predicted f1 z-score +")  # a rank, not a metric


@pytest.mark.parametrize("normalize", ["none", "dataset"])
def test_fit_draws_predicted_vs_actual_on_the_metrics_scale_under_either_normalisation(tmp_path, normalize):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    from ragfunnel.scaling.allocation import load_fit

    runs = [write_run(tmp_path / name, DRAG_GRID) for name in ("a", "b")]
    out = tmp_path / "fit.json"
    result = CliRunner().invoke(scale, ["fit", *map(str, runs), "--metric", "f1", "--normalize", normalize,
                                        "--out", str(out)])
    assert result.exit_code == 0, result.output
    png = tmp_path / "fit_predicted_vs_actual.png"
    assert f"wrote {out} and {png}" in result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    # The plot's points are predict_metric's: metrics (not z-scores), whose R² is the one in its title.
    allocation = load_fit(out)
    points = [(allocation.predict_metric(o.config, t.i, t.dataset), o.metric)
              for t in allocation.tasks for o in t.observations]
    predicted, actual = map(np.array, zip(*points, strict=True))
    r2 = 1 - np.sum((actual - predicted) ** 2) / np.sum((actual - actual.mean()) ** 2)
    assert r2 == pytest.approx(allocation.r2_metric) and r2 > 0.99
    assert 0.0 < predicted.min() and predicted.max() < 1.0


def test_plan_with_unrun_proposes_a_configuration_never_run(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    run = write_run(tmp_path / "run", [c for c in DRAG_GRID if c != Config("drag", 2, 2)])
    out = tmp_path / "fit.json"
    assert CliRunner().invoke(scale, ["fit", str(run), "--metric", "f1", "--out", str(out)]).exit_code == 0
    args = ["--budget", "1k", "--fit", str(out), "--task", str(run)]
    # Measured only (the default): drag k=2 m=1, 550 tokens, F1 σ(0.4 ln 2.01 + 0.15 ln 1.01 − 1) = 0.3276.
    measured = CliRunner().invoke(plan, args)
    assert measured.exit_code == 0, measured.output
    assert measured.stdout == ("drag k=2 m=1 n=1: predicted f1 0.328 at ~550 tokens (measured on the task); "
                               "11 of 19 candidates fit 1k\n")
    # With --unrun, drag k=2 m=2 (0.3507) comes back; its 800 tokens are estimated from the run's per-unit
    # costs, 100 + 100 k (m + 1) + 50 m, which the run's configurations follow exactly.
    space = ["--unrun", "--documents", "0,1,2,5,10", "--shots", "0,1,2,4"]
    unrun = CliRunner().invoke(plan, [*args, *space, "--top", "2"])
    assert unrun.exit_code == 0, unrun.output
    assert unrun.stdout.splitlines() == [
        "drag k=2 m=2 n=1: predicted f1 0.351 at ~800 tokens (never run; tokens estimated from the task's unit "
        "costs); 12 of 20 candidates fit 1k",
        "drag k=2 m=1 n=1: predicted f1 0.328 at ~550 tokens (measured on the task)"]
    as_json = json.loads(CliRunner().invoke(scale, ["plan", *args, *space, "--json", "--top", "2"]).stdout)
    assert (as_json["documents"], as_json["shots"], as_json["never_run"], as_json["ran_on"]) == (2, 2, True, None)
    assert as_json["tokens_from"] == "costs" and as_json["estimated_tokens"] == 800 and as_json["unit"] == "f1"
    assert as_json["token_costs"]["drag"]["per_document"] == pytest.approx(100)
    assert [(p["shots"], p["never_run"]) for p in as_json["proposals"]] == [(2, True), (1, False)]
    alone = CliRunner().invoke(plan, [*args, "--shots", "1,2"])
    assert alone.exit_code == 1
    assert alone.output == ("error: --shots only apply with --unrun (they choose the configurations it proposes); "
                            "add --unrun\n")


def test_loo_holds_out_each_run_and_compares_with_the_oracle_and_baseline(tmp_path):
    runs = [str(write_run(tmp_path / name, DRAG_GRID)) for name in ("a", "b", "c")]
    out = tmp_path / "loo" / "loo.json"
    result = CliRunner().invoke(scale, ["loo", *runs, "--metric", "f1", "--normalize", "none", "--out", str(out)])
    assert result.exit_code == 0, result.output
    # The budgets are the runs' (1k, 4k). Within 1k the best is drag k=2 m=2 (F1 0.351); the baseline, DRAG with
    # the most shots up to 8 the runs have (m=4), fits 1 document (800 tokens, 0.313). Within 4k: drag k=10 m=2
    # (3,200 tokens, σ(0.4 ln 10.01 + 0.15 ln 2.01 − 1) = 0.507) and the baseline k=5 m=4 (2,800, 0.463).
    lines = result.stdout.splitlines()
    assert f"| {runs[0]} | 1k | drag (1,4,1) | 0.313 | drag (2,2,1) | 0.351 | drag (2,2,1) | 0.351 |" in lines
    assert f"| {runs[2]} | 4k | drag (5,4,1) | 0.463 | drag (10,2,1) | 0.507 | drag (10,2,1) | 0.507 |" in lines
    assert "model's choice 0.429 = 100.0% of the oracle's 0.429 over 6 (dataset, budget) cells; as good as the " \
           "oracle in 6" in lines
    assert "baseline 0.388 vs the model's 0.429 on the 6 cells with a baseline" in lines
    data = json.loads(out.read_text())
    assert data["normalize"] == "none" and data["summary"]["matches"] == 6
    assert data["datasets"][1]["fit"]["trained_on"] == [runs[0], runs[2]]
    as_json = json.loads(CliRunner().invoke(scale, ["loo", *runs, "--metric", "f1", "--json"]).stdout)
    assert as_json["normalize"] == "dataset" and len(as_json["datasets"]) == 3  # the paper's normalisation by default
    one = CliRunner().invoke(scale, ["loo", runs[0]])
    assert one.exit_code == 1
    assert one.output == (f"error: leave-one-dataset-out needs grid runs of at least 2 datasets, got 1 ({runs[0]}); "
                          "give the others too\n")


def test_demonstrations_log_the_ragfunnel_version_of_each_attempt(tmp_path):
    from ragfunnel.methods.demonstrations import Demonstration
    from ragfunnel.scaling.demonstrations import extend_demonstrations
    from ragfunnel.types import Example

    out = tmp_path / "demos.jsonl"
    examples = [Example(f"q{i}", f"Question {i}?", answers=["A"]) for i in range(2)]
    extend_demonstrations(examples, out, lambda e: (Demonstration(e.question, "A", id=e.id), "kept"), progress=False)
    rows = [json.loads(line) for line in (tmp_path / "demos.jsonl.log.jsonl").read_text().splitlines()]
    assert [(r["id"], r[VERSION_KEY]) for r in rows] == [("q0", __version__), ("q1", __version__)]
