"""The pure helpers of benchmarks/scaling.py: question split, worst-case cost, thinning, R²."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from ragfunnel.errors import ConfigError
from ragfunnel.scaling.grid import Config, default_grid
from ragfunnel.types import Example

_spec = importlib.util.spec_from_file_location("scaling_benchmark",
                                               Path(__file__).resolve().parents[1] / "benchmarks" / "scaling.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # dataclasses look their module up there
_spec.loader.exec_module(bench)


def _examples(n: int) -> list[Example]:
    return [Example(id=f"q{i}", question=f"question {i}?", context=None, answers=[f"a{i}"]) for i in range(n)]


def test_split_takes_grid_from_the_front_and_training_from_the_back():
    split = bench.split_questions(_examples(10), questions=5, held_back=2, train=3)
    assert [e.id for e in split.fit] == ["q0", "q1", "q2"]
    assert [e.id for e in split.held_back] == ["q3", "q4"]
    assert [e.id for e in split.train] == ["q7", "q8", "q9"]
    assert [e.id for e in split.grid] == ["q0", "q1", "q2", "q3", "q4"]


def test_split_without_training_questions_or_held_back_ones():
    split = bench.split_questions(_examples(4), questions=4, held_back=0, train=0)
    assert len(split.fit) == 4 and split.held_back == [] and split.train == []


@pytest.mark.parametrize(("questions", "held_back", "train", "says"), [
    (0, 0, 1, "--questions"),
    (3, 3, 1, "--held-back"),
    (3, -1, 1, "--held-back"),
    (6, 1, 5, "need 11 questions but the dataset has 10"),
])
def test_split_refuses_what_cannot_be_split(questions, held_back, train, says):
    with pytest.raises(ConfigError, match=says):
        bench.split_questions(_examples(10), questions, held_back, train)


def test_worst_case_counts_two_calls_per_iteration_and_the_final_one():
    assert bench.worst_case_tokens(Config("iterdrag", 5, 1, 3), 1000) == 7000
    assert bench.worst_case_tokens(Config("iterdrag", 5, 1, 1), 1000) == 3000
    assert bench.worst_case_tokens(Config("drag", 5, 1), 1000) == 1000


def test_base_configs_per_method():
    configs = default_grid(documents=(0, 1, 5), shots=(0, 1), iterations=(1, 2))
    assert [c.label for c in bench.base_configs(configs)] == [
        "zero-shot k=0 m=0 n=1", "rag k=1 m=0 n=1", "drag k=0 m=1 n=1",
        "iterdrag k=0 m=0 n=1", "iterdrag k=1 m=0 n=1", "iterdrag k=0 m=1 n=1",
    ]


def test_selection_keeps_the_bases_and_the_dearest_per_budget_band_and_strategy():
    configs = default_grid(documents=(0, 1, 2, 5, 10), shots=(0, 1), iterations=(1, 2))
    cost = {c: (100 * c.documents + 300 * c.shots + 50) * (2 * c.iterations + 1 if c.method == "iterdrag" else 1)
            for c in configs}.__getitem__
    chosen = bench.select_configs(configs, cost, [1000, 2000], per_budget=1)
    assert [(cost(c), c.label) for c in chosen] == [
        (50, "zero-shot k=0 m=0 n=1"),  # the six bases ...
        (150, "iterdrag k=0 m=0 n=1"),
        (150, "rag k=1 m=0 n=1"),
        (350, "drag k=0 m=1 n=1"),
        (450, "iterdrag k=1 m=0 n=1"),
        (550, "rag k=5 m=0 n=1"),  # ... band (0, 1k]: the dearest rag, drag and iterdrag (a tie goes by label)
        (750, "iterdrag k=1 m=0 n=2"),
        (850, "drag k=5 m=1 n=1"),
        (1050, "iterdrag k=0 m=1 n=1"),  # a base, in the second band
        (1050, "rag k=10 m=0 n=1"),  # band (1k, 2k]
        (1350, "drag k=10 m=1 n=1"),
        (1750, "iterdrag k=0 m=1 n=2"),
    ]


def test_selection_without_thinning_keeps_everything_that_fits_cheapest_first():
    configs = default_grid(["zero-shot", "rag"], documents=(0, 1, 2, 50))
    cost = {c: 100 * c.documents + 50 for c in configs}.__getitem__
    assert [c.documents for c in bench.select_configs(configs, cost, [300], per_budget=None)] == [0, 1, 2]
    assert [c.documents for c in bench.select_configs(configs, cost, [300], per_budget=0)] == [0, 1]  # bases only


def test_r2_against_hand_computed_values():
    assert bench.r2([0.0, 1.0, 2.0], [0.0, 1.0, 2.0]) == 1.0
    assert bench.r2([0.0, 1.0, 2.0], [1.0, 1.0, 1.0]) == 0.0
    assert bench.r2([1.0, 1.0], [0.5, 1.0]) is None
    assert bench.r2([], []) is None
