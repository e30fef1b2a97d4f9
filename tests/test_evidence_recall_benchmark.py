"""The rankings benchmarks/evidence_recall.py measured the shared ranking against, on hand-computed cases."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

_path = Path(__file__).resolve().parents[1] / "benchmarks" / "evidence_recall.py"
_spec = importlib.util.spec_from_file_location("evidence_recall_benchmark", _path)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def test_reciprocal_rank_fusion_by_hand():
    # ranks under a: 1, 3, 2; under b: 3, 1, 2 -> 1/61 + 1/63 for the first two, 2/62 for the third
    fused = bench.reciprocal_rank(np.array([3.0, 1.0, 2.0]), np.array([1.0, 3.0, 2.0]), k=60)
    np.testing.assert_allclose(fused, [1 / 61 + 1 / 63, 1 / 63 + 1 / 61, 2 / 62])


def test_neighbours_lift_a_chunk_to_half_its_better_neighbour():
    np.testing.assert_allclose(bench.with_neighbours(np.array([0.0, 4.0, 0.0, 0.0, 1.0])), [2.0, 4.0, 2.0, 0.5, 1.0])


def test_feedback_searches_the_rare_terms_the_best_chunk_shares_with_another():
    from ragfunnel.text import chunk_words

    text = ("Ada Brun kept the Gull Rock light with Wendeline. " + "filler words here. " * 6
            + "Wendeline was born in Tromso in 1911. " + "other filler text. " * 6 + "Unrelated lines here.")
    chunks = chunk_words(text, chunk_words=9)
    first = bench.bm25_scores("Who kept the Gull Rock light?", chunks)
    terms = bench.feedback_terms("Who kept the Gull Rock light?", chunks, first)
    assert "wendelin" in terms  # stemmed; shared by the best chunk and the bridge's own
    scored = bench.with_feedback("Who kept the Gull Rock light?", chunks, first)
    bridge = next(i for i, c in enumerate(chunks) if "Tromso" in c.text)
    assert first[bridge] == 0 and scored[bridge] > 0  # the question alone never reaches it
