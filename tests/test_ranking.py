"""The shared chunk ranking: fusions by hand, and BM25 alone (one warning) where MiniLM cannot load."""

import logging

import numpy as np
import pytest

import ragfunnel.retrieve.ranking as ranking
from ragfunnel.errors import ConfigError, MissingExtra
from ragfunnel.retrieve.ranking import fuse, question_scores, reciprocal_rank, unit_range, with_neighbours
from ragfunnel.text import chunk_words


def test_reciprocal_rank_fusion_by_hand():
    # ranks under a: 1, 3, 2; under b: 3, 1, 2 -> 1/61 + 1/63 for the first two, 2/62 for the third
    fused = reciprocal_rank(np.array([3.0, 1.0, 2.0]), np.array([1.0, 3.0, 2.0]), k=60)
    np.testing.assert_allclose(fused, [1 / 61 + 1 / 63, 1 / 63 + 1 / 61, 2 / 62])


def test_hybrid_adds_max_normalised_bm25_to_the_cosine_rescaled_to_unit_range():
    np.testing.assert_allclose(unit_range(np.array([1.0, 3.0, 2.0])), [0.0, 1.0, 0.5])
    np.testing.assert_allclose(unit_range(np.array([0.4, 0.4])), [0.0, 0.0])  # all equal: nothing to tell
    hybrid = fuse("hybrid", np.array([2.0, 4.0, 0.0]), np.array([0.1, 0.3, 0.5]))
    np.testing.assert_allclose(hybrid, [0.5 + 0.0, 1.0 + 0.5, 0.0 + 1.0])


def test_neighbours_lift_a_chunk_to_half_its_better_neighbour():
    np.testing.assert_allclose(with_neighbours(np.array([0.0, 4.0, 0.0, 0.0, 1.0])), [2.0, 4.0, 2.0, 0.5, 1.0])
    np.testing.assert_allclose(fuse("bm25+nb", np.array([0.0, 4.0, 0.0]), None), [2.0, 4.0, 2.0])


def test_an_unknown_ranking_is_refused():
    with pytest.raises(ConfigError, match="unknown ranking 'bm26'; valid: bm25, dense"):
        fuse("bm26", np.zeros(2))


def test_without_minilm_the_ranking_is_bm25_alone_with_one_warning(monkeypatch, caplog):
    def missing(*args, **kwargs):
        raise MissingExtra("onnxruntime and tokenizers", "embed")

    monkeypatch.setattr(ranking, "dense_scores", missing)
    monkeypatch.setattr(ranking, "_fallback_reported", False)
    chunks = chunk_words("alpha beta gamma " * 20 + "keeper of the light " * 5, chunk_words=20)
    with caplog.at_level(logging.WARNING, logger="ragfunnel.retrieve.ranking"):
        first = question_scores("who was the keeper?", chunks)
        question_scores("who was the keeper?", chunks)
    np.testing.assert_allclose(first, ranking.bm25_scores("who was the keeper?", chunks))
    warned = [r for r in caplog.records if "BM25 alone" in r.getMessage()]
    assert len(warned) == 1 and "embed" in warned[0].getMessage()
