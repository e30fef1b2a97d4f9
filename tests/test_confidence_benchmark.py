"""The replay and per-signal helpers of benchmarks/confidence.py, on hand-made rows (no model)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from ragfunnel.eval.runner import EvalRow

_spec = importlib.util.spec_from_file_location("confidence_benchmark",
                                               Path(__file__).resolve().parents[1] / "benchmarks" / "confidence.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def row(method: str, f1: float, confidence: float, seconds: float, **signals: float) -> EvalRow:
    return EvalRow("q", method, {"f1": f1}, trace={"seconds": seconds, "input_tokens": 1, "stages": []},
                   confidence=confidence, signals=signals)


def test_auto_is_replayed_rung_by_rung_keeping_the_most_confident_answer():
    questions = {
        "sure": {"op": row("op", 1.0, 0.9, 10.0), "fb": row("fb", 0.0, 0.95, 30.0)},  # op is sure: fb never runs
        "unsure": {"op": row("op", 0.0, 0.2, 12.0), "fb": row("fb", 1.0, 0.6, 40.0)},  # climbs, keeps fb
    }
    by_confidence = lambda r: r.confidence  # noqa: E731
    balanced = bench.replay_auto(questions, by_confidence, "balanced", 0.4)
    assert balanced == {"quality": 100.0, "mean_seconds": pytest.approx((10 + 12 + 40) / 2), "climbed": 1, "n": 2}
    speed = bench.replay_auto(questions, by_confidence, "speed")
    assert speed["quality"] == 50.0 and speed["climbed"] == 0 and speed["mean_seconds"] == 11.0
    everything = bench.replay_auto(questions, by_confidence, "balanced", 1.0)  # climbs on both; keeps fb's 0.95
    assert everything["quality"] == 50.0 and everything["climbed"] == 2


def test_each_signal_is_scored_alone_over_the_rows_that_have_it():
    rows = [row("op", 1.0, 0.5, 1.0, support=1.0, echo=0.0), row("op", 1.0, 0.5, 1.0, support=0.8),
            row("op", 0.0, 0.5, 1.0, support=0.2, echo=1.0), row("op", 0.0, 0.5, 1.0, support=0.9, echo=0.5)]
    aurocs = bench.signal_aurocs(rows)
    assert aurocs["support"] == {"auroc": 0.75, "n": 4}  # right (1.0, 0.8) vs wrong (0.2, 0.9): 3 of 4 pairs
    assert aurocs["echo"] == {"auroc": 0.0, "n": 3}  # higher echo, wrong: the signal points the other way


def test_the_halves_split_every_method_of_a_question_alike():
    ids = [f"hotpot-{i}" for i in range(200)]
    held = [bench.held_out(i) for i in ids]
    assert 70 < sum(held) < 130 and held == [bench.held_out(i) for i in ids]
