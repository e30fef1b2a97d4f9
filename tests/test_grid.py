"""Configurations, budgets and the resumable grid runner (no model)."""

import json

import pytest

from ragfunnel.errors import ConfigError
from ragfunnel.journal import ROWS_FILE
from ragfunnel.scaling.grid import (
    Config,
    default_grid,
    format_tokens,
    load_grid,
    parse_budget,
    parse_budgets,
    run_grid,
    within_budget,
)
from ragfunnel.scaling.summary import summarize
from tests.helpers.runs import CONFIGS, FakeMethod, examples


def test_config_names_and_validation():
    assert Config("iterdrag", 2, 4, 3).theta == (2, 4, 3) and Config("rag", 5, 0).method == "drag"
    assert Config.for_theta("drag", 0, 0) == Config("zero-shot", 0, 0)
    assert Config.for_theta("drag", 3, 0) == Config("rag", 3, 0)
    assert Config.for_theta("drag", 0, 2) == Config("drag", 0, 2)
    assert Config.for_theta("iterdrag", 0, 0, 4) == Config("iterdrag", 0, 0, 4)
    with pytest.raises(ConfigError, match="unknown strategy 'self-ask'; valid strategies: zero-shot, rag, drag, iter"):
        Config("self-ask", 1, 1)
    with pytest.raises(ConfigError, match="drag k=5 m=2 n=3: drag answers in one call, so iterations must be 1"):
        Config("drag", 5, 2, 3)
    with pytest.raises(ConfigError, match="rag k=5 m=2 n=1 is named 'drag'"):
        Config("rag", 5, 2)
    with pytest.raises(ConfigError, match="iterations >= 1"):
        Config("iterdrag", 1, 1, 0)


def test_default_grid_names_each_theta_once():
    grid = default_grid(documents=(0, 1), shots=(0, 1), iterations=(1, 2))
    assert grid == [
        Config("zero-shot", 0, 0), Config("iterdrag", 0, 0, 1), Config("iterdrag", 0, 0, 2),
        Config("drag", 0, 1), Config("iterdrag", 0, 1, 1), Config("iterdrag", 0, 1, 2),
        Config("rag", 1, 0), Config("iterdrag", 1, 0, 1), Config("iterdrag", 1, 0, 2),
        Config("drag", 1, 1), Config("iterdrag", 1, 1, 1), Config("iterdrag", 1, 1, 2),
    ]
    assert default_grid(["rag"], documents=(0, 1, 5), shots=(0, 1)) == [Config("rag", 1, 0), Config("rag", 5, 0)]
    assert len(default_grid(["drag"])) == 11 * 9  # the paper's k values x m = 1 .. 256
    with pytest.raises(ConfigError, match="unknown strategy 'dragon'"):
        default_grid(["dragon"])


def test_budgets_parse_and_format():
    assert parse_budgets("16k, 2k,4k,2k") == [2000, 4000, 16000]
    assert parse_budget("1.5K") == 1500 and parse_budget("1m") == 1_000_000 and parse_budget("16000") == 16000
    for bad in ("2kb", "k", "0", "-1k", "two"):
        with pytest.raises(ConfigError, match=f"bad token budget '{bad}'"):
            parse_budget(bad)
    with pytest.raises(ConfigError, match="no token budgets"):
        parse_budgets(" , ")
    assert [format_tokens(t) for t in (950, 1500, 16000, 1_000_000)] == ["950", "1.5k", "16k", "1m"]


def test_within_budget_and_a_budget_too_small_for_anything():
    cost = {Config("zero-shot", 0, 0): 120, Config("rag", 1, 0): 250, Config("drag", 1, 1): 600}
    assert within_budget(cost, 250, cost.__getitem__) == [Config("zero-shot", 0, 0), Config("rag", 1, 0)]
    with pytest.raises(ConfigError, match=r"budget of 100 tokens .* smallest that fits is 120 tokens "
                                          r"\(zero-shot k=0 m=0 n=1\)"):
        within_budget(cost, 100, cost.__getitem__)


def test_rows_record_metrics_tokens_and_trace(tmp_path):
    built = []

    def make(config):
        built.append(config)
        return FakeMethod(config)

    result = run_grid(examples(3), CONFIGS, make, tmp_path, config_meta={"dataset": "d"}, progress=False)
    assert result.written == 9 and built == CONFIGS  # one method object per configuration
    raw = [json.loads(x) for x in (tmp_path / ROWS_FILE).read_text().splitlines()]
    assert [(r["strategy"], r["example_id"]) for r in raw[:4]] == [("zero-shot", "q0"), ("zero-shot", "q1"),
                                                                    ("zero-shot", "q2"), ("rag", "q0")]
    it = raw[-1]
    assert (it["documents"], it["shots"], it["iterations"], it["answer"]) == (1, 0, 2, "Paris")
    assert it["metrics"] == {"f1": 1.0, "em": 1.0, "accuracy": 1.0}
    assert (it["effective_tokens"], it["max_call_tokens"]) == (200 + 210, 210)
    assert [s["input_tokens"] for s in it["trace"]["stages"]] == [200, 210]
    assert raw[0]["metrics"]["em"] == 0.0 and raw[0]["effective_tokens"] == 100
    assert load_grid(tmp_path).rows == result.rows


def test_resume_after_a_torn_last_line_gives_one_row_per_pair(tmp_path):
    run_grid(examples(2), CONFIGS[:2], FakeMethod, tmp_path, config_meta={}, progress=False)
    rows = tmp_path / ROWS_FILE
    lines = rows.read_text().splitlines()
    rows.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:23])  # killed while writing the 4th row
    again = run_grid(examples(2), CONFIGS, FakeMethod, tmp_path, config_meta={}, progress=False)
    assert again.written == 1 + 2  # the torn row, then the new configuration
    pairs = [(json.loads(x)["example_id"], json.loads(x)["strategy"]) for x in rows.read_text().splitlines()]
    assert len(pairs) == 6 == len(set(pairs))


@pytest.mark.parametrize("cold, resets", [(True, 4), (False, 0)])
def test_prompt_caches_are_dropped_before_each_answer_unless_kept(tmp_path, monkeypatch, cold, resets):
    dropped = []
    monkeypatch.setattr("ragfunnel.scaling.grid.reset_loaded", lambda: dropped.append(1))
    run_grid(examples(2), CONFIGS[:2], FakeMethod, tmp_path, config_meta={}, progress=False, cold_caches=cold)
    assert len(dropped) == resets


def test_a_different_run_configuration_is_refused(tmp_path):
    run_grid(examples(1), CONFIGS[:1], FakeMethod, tmp_path, config_meta={"dataset": "a"}, progress=False)
    with pytest.raises(ConfigError, match=r"differs in: dataset.*new directory \(out\)"):
        run_grid(examples(1), CONFIGS[:1], FakeMethod, tmp_path, config_meta={"dataset": "b"}, progress=False)


def test_failures_become_counted_rows(tmp_path):
    def make(config):
        if config.strategy == "drag":
            raise ConfigError("only 1 demonstration for m=2; give a larger training set")
        return FakeMethod(config, fail=config.strategy == "rag")

    configs = [Config("zero-shot", 0, 0), Config("rag", 1, 0), Config("drag", 1, 2)]
    result = run_grid(examples(2), configs, make, tmp_path, config_meta={}, progress=False)
    assert len(result.rows) == 6
    assert [r.error for r in result.rows[2:]] == ["the model crashed"] * 2 + ["only 1 demonstration for m=2; "
                                                                               "give a larger training set"] * 2
    zs, rag, drag = summarize(result.rows)
    assert (zs.n, zs.failures, zs.effective_tokens) == (2, 0, 100)
    assert (rag.n, rag.failures, rag.accuracy, rag.effective_tokens) == (2, 2, 0.0, None)
    assert drag.failures == 2
