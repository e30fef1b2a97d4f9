"""The shared chunk ranking: the fusion by hand, the vectors kept, and BM25 alone (one warning) where MiniLM
cannot load. The alternatives it was measured against are tested in test_evidence_recall_benchmark.py."""

import logging

import numpy as np

import ragfunnel.retrieve.ranking as ranking
from ragfunnel.errors import MissingExtra
from ragfunnel.retrieve.ranking import PieceVectors, hybrid, question_scores, unit_range
from ragfunnel.text import chunk_words


def test_hybrid_adds_max_normalised_bm25_to_the_cosine_rescaled_to_unit_range():
    np.testing.assert_allclose(unit_range(np.array([1.0, 3.0, 2.0])), [0.0, 1.0, 0.5])
    np.testing.assert_allclose(unit_range(np.array([0.4, 0.4])), [0.0, 0.0])  # all equal: nothing to tell
    np.testing.assert_allclose(hybrid(np.array([2.0, 4.0, 0.0]), np.array([0.1, 0.3, 0.5])),
                               [0.5 + 0.0, 1.0 + 0.5, 0.0 + 1.0])


def test_piece_vectors_encode_each_new_text_once_and_keep_the_most_recent(monkeypatch):
    encoded = []

    class Counting:
        def encode(self, texts):
            encoded.extend(texts)
            return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

    monkeypatch.setattr("ragfunnel.retrieve.embed.bundled_embedder", lambda: Counting())
    kept = PieceVectors(capacity=2)
    first = kept.encode(["ab", "abc", "ab"])
    assert encoded == ["ab", "abc"] and first[:, 0].tolist() == [2.0, 3.0, 2.0]
    kept.encode(["abc"])
    assert encoded == ["ab", "abc"]  # kept: nothing encoded again
    kept.encode(["abcd"])  # over capacity: "ab", the least recently used, goes
    kept.encode(["ab"])
    assert encoded == ["ab", "abc", "abcd", "ab"]


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


def test_past_dense_max_chunks_only_bm25s_best_are_embedded_and_the_rest_score_the_lowest_cosine(monkeypatch):
    embedded = []

    class Recording:
        def encode(self, texts):
            embedded.extend(texts)
            return np.array([[1.0, float(len(t) % 7)] for t in texts], dtype=np.float32)

    monkeypatch.setattr("ragfunnel.retrieve.embed.bundled_embedder", lambda: Recording())
    monkeypatch.setattr(ranking, "PIECES", PieceVectors())
    n = ranking.DENSE_MAX_CHUNKS + 10
    chunks = chunk_words(" ".join(f"filler{i} keeper" if i % 2 else f"filler{i} other" for i in range(n * 5)),
                         chunk_words=5)
    question = "who was the keeper?"
    bm25 = ranking.bm25_scores(question, chunks)
    best = set(np.argsort(-bm25, kind="stable")[:ranking.DENSE_MAX_CHUNKS].tolist())
    scores = question_scores(question, chunks)
    assert len(embedded) == 1 + ranking.DENSE_MAX_CHUNKS  # the question and each of the best chunks, once
    assert set(embedded[1:]) == {chunks[i].text for i in best}
    rest = [i for i in range(n) if i not in best]
    np.testing.assert_allclose(scores[rest], ranking.max_normalize(bm25)[0][rest] + 0.0)
