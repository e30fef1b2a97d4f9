"""The table helpers of benchmarks/longbench.py, on run directories written with the FakeLLM (no model)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ragfunnel.eval.runner import run_eval
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.types import Example

_spec = importlib.util.spec_from_file_location("longbench_benchmark",
                                               Path(__file__).resolve().parents[1] / "benchmarks" / "longbench.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def _run(path: Path, replies: dict[str, str], methods: list[str]) -> None:
    """Two qasper questions whose reference is "Paris"; each method replies as ``replies`` says."""
    examples = [Example(id=f"qasper-{i}", question=f"Which city {i}?", context="The city is Paris.",
                        answers=["Paris"], task="longbench/qasper", meta={"dataset": "qasper"}) for i in range(2)]
    built = {m: make_method("lc", strong=FakeLLM(lambda prompt, i, m=m: replies[m]), task="longbench/qasper")
             for m in methods}
    config = {"task": "longbench/qasper", "method_options": {m: {} for m in methods}}
    run_eval(examples, built, path, config=config, metric_profile="longbench", progress=False)


def test_table_pairs_examples_and_puts_the_papers_rows_beside(tmp_path):
    _run(tmp_path / "qasper", {"op": "Paris", "fb": "Rome"}, ["op", "fb"])
    text, results = bench.table([tmp_path / "qasper"])
    assert results["op"]["scores"] == {"qasper": 100.0} and results["fb"]["scores"] == {"qasper": 0.0}
    assert results["op"]["average_over"] == ["qasper"] and results["op"]["n"] == {"qasper": 2}
    assert "| ragfunnel op | 100.00 | – | 100.00 (n=2) |" in text
    assert "| paper OP 1.5k | 49.31 | 23.89 | 49.31 |" in text  # the paper's average over the same datasets


def test_paired_counts_wins_ties_and_losses(tmp_path):
    _run(tmp_path / "qasper", {"op": "Paris", "fb": "Rome"}, ["op", "fb"])
    text, pairs = bench.paired([tmp_path / "qasper"])
    assert pairs["fb - op"] == {"n": 2, "mean": -100.0, "wins": 0, "ties": 0, "losses": 2}
    assert "| fb − op | 2 | -100.00 | 0 / 0 / 2 |" in text
