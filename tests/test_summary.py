"""Summaries of a grid run's rows, the optimal-performance table and the summary files (no model)."""

import pytest

from ragfunnel.errors import ConfigError, InputError
from ragfunnel.scaling.grid import Config
from ragfunnel.scaling.summary import optimal_per_budget, optimal_table, summarize
from ragfunnel.scaling.summary_files import SUMMARY_FILE, SUMMARY_PLOT, write_summary
from tests.helpers.grid_rows import TABLE, rows, write_run


def test_optimal_performance_per_budget_and_strategy():
    summaries = summarize([r for c, f, t in TABLE for r in rows(c, f, t)])
    assert [(s.f1, s.effective_tokens, s.accuracy) for s in summaries[:3]] == [
        pytest.approx((0.2, 100, 0.0)), pytest.approx((0.4, 300, 0.0)), pytest.approx((0.4, 500, 0.5))]
    optima = optimal_per_budget(summaries, [16000, 1000, 4000], "f1")
    chosen = {(o.budget, o.strategy): o.best.config.theta if o.best else None for o in optima}
    assert chosen == {
        (1000, "zero-shot"): (0, 0, 1), (1000, "rag"): (1, 0, 1), (1000, "drag"): (1, 2, 1),
        (1000, "iterdrag"): None, (1000, "best"): (1, 2, 1),
        (4000, "zero-shot"): (0, 0, 1), (4000, "rag"): (5, 0, 1), (4000, "drag"): (5, 4, 1),
        (4000, "iterdrag"): (1, 1, 2), (4000, "best"): (5, 4, 1),
        (16000, "zero-shot"): (0, 0, 1), (16000, "rag"): (5, 0, 1), (16000, "drag"): (5, 4, 1),
        (16000, "iterdrag"): (5, 1, 3), (16000, "best"): (5, 1, 3),
    }
    assert [o.budget for o in optima][:5] == [1000] * 5
    table = optimal_table(optima, "f1")
    assert "| 1k | drag | 1 | 2 | 1 | 900 | 0.000 | 0.450 | 0.500 |" in table
    assert "| 1k | iterdrag | - | - | - | - | - | - | - |" in table
    assert "| 16k | **best** (iterdrag) | 5 | 1 | 3 | 9000 | 0.000 | 0.800 | 1.000 |" in table


def test_unknown_metric_is_refused():
    (s,) = summarize(rows(Config("rag", 1, 0), (0.5,), (10,)))
    with pytest.raises(ConfigError, match="unknown metric 'rouge'; valid metrics: accuracy, em, f1"):
        s.metric("rouge")


def test_write_summary_writes_the_table_it_returns_and_the_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    run = write_run(tmp_path / "run", [r for c, f, t in TABLE for r in rows(c, f, t)])
    written = write_summary(run, [4000, 1000], "f1")
    assert (written.table_path, written.plot_path) == (run / SUMMARY_FILE, run / SUMMARY_PLOT)
    assert written.table_path.read_text(encoding="utf-8") == written.table
    lines = written.table.splitlines()
    assert lines[0] == ("Optimal performance per budget L_max (configurations chosen by f1; tokens: mean effective "
                        "context length)")
    # Within 1k: zero-shot (100 tokens, F1 0.20), rag k=1 (300, 0.40: ties k=2 at 500, cheaper), drag k=1 m=2
    # (900, 0.45), no iterdrag (the cheapest is 2000 tokens); the best is that DRAG. Budgets come out sorted.
    assert lines[4:9] == ["| 1k | zero-shot | 0 | 0 | 1 | 100 | 0.000 | 0.200 | 0.000 |",
                          "| 1k | rag | 1 | 0 | 1 | 300 | 0.000 | 0.400 | 0.000 |",
                          "| 1k | drag | 1 | 2 | 1 | 900 | 0.000 | 0.450 | 0.500 |",
                          "| 1k | iterdrag | - | - | - | - | - | - | - |",
                          "| 1k | **best** (drag) | 1 | 2 | 1 | 900 | 0.000 | 0.450 | 0.500 |"]
    assert lines[13] == "| 4k | **best** (drag) | 5 | 4 | 1 | 3500 | 0.000 | 0.700 | 1.000 |" and len(lines) == 14
    assert written.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_summary_of_a_run_without_rows_says_to_run_the_grid(tmp_path):
    run = write_run(tmp_path / "run", [])
    with pytest.raises(InputError, match="holds no rows yet; run `ragfunnel scale grid` into it first"):
        write_summary(run, [1000], "f1")
    assert not (run / SUMMARY_FILE).exists()
