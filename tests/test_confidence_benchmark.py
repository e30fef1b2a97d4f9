"""The replay and per-signal helpers of benchmarks/confidence.py, on hand-made rows (no model)."""

from __future__ import annotations

import importlib.util
import json
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


def test_the_caution_is_reported_by_both_of_its_rates():
    rows = [row("op", 0.0, 0.1, 1.0), row("op", 1.0, 0.2, 1.0), row("op", 0.0, 0.25, 1.0),  # flagged below 0.3
            row("op", 0.0, 0.5, 1.0), row("op", 1.0, 0.9, 1.0)]
    report = bench.supported_report([r.confidence for r in rows], rows, 0.3)
    assert report["flagged"] == 3 and report["right_when_flagged"] == pytest.approx(1 / 3, abs=1e-3)
    assert report["wrong_flagged"] == pytest.approx(2 / 3, abs=1e-3)  # two of the three wrong answers carry the caution


def test_rows_written_before_the_answer_check_get_it_from_their_question_and_answer(tmp_path):
    run = tmp_path / "musique-op"
    run.mkdir()
    (run / "config.json").write_text("{}")
    rows = [EvalRow(example_id, "op", {"f1": 0.0}, question="When was the bridge opened?", answer=answer,
                    trace={"seconds": 1.0, "input_tokens": 1, "stages": []},
                    signals={"answer_logprob_mean": -0.5})
            for example_id, answer in (("a", "Paris"), ("b", "1932"))]
    (run / "rows.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    checks = {r.example_id: r.signals["answer_check"] for _, r in bench.load_rows(tmp_path)}
    assert checks == {"a": 0.0, "b": 1.0}  # a place for "when" fails the type check; a year passes
