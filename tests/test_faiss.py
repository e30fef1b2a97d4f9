"""FAISS over flat vectors (the [faiss] extra), held against exact numpy search on seeded synthetic vectors.

The vectors are a mixture of 100 Gaussian clusters in 32 dimensions, normalised: like sentence
embeddings, and unlike uniform random vectors, they have neighbourhoods an approximate index can find.
"""

import numpy as np
import pytest

from ragfunnel.corpus.index import nearest
from ragfunnel.retrieve.faiss_search import FaissConfig, FaissIndex, build, choose_kind, default_params
from tests.helpers.vectors import clustered


@pytest.fixture(scope="module")
def corpus():
    """20k base vectors, 100 queries from the same mixture, and exact search's top 10 of each."""
    vectors, queries = clustered(20_000, seed=1), clustered(100, seed=2)
    return vectors, queries, [nearest(vectors, q, 10) for q in queries]


def opened(faiss, tmp_path, vectors: np.ndarray, kind: str, **params: int) -> FaissIndex:
    config = build(vectors, tmp_path / "flat.faiss", kind, params=params or None)
    return FaissIndex(tmp_path / "flat.faiss", config, rows=len(vectors), dim=vectors.shape[1])


def recall_at_10(index: FaissIndex, vectors, queries, exact) -> float:
    found = [index.search(q, 10, vectors=vectors)[0] for q in queries]
    return float(np.mean([len(set(f) & set(e)) / 10 for f, (e, _) in zip(found, exact, strict=True)]))


def test_the_index_type_follows_corpus_size_and_memory():
    plenty, little = 64 << 30, 1 << 30
    assert choose_kind(100_000, 384, memory_bytes=plenty) == "flat"  # exact search is cheap enough here
    assert choose_kind(100_000, 384, memory_bytes=1) == "flat"
    assert choose_kind(100_001, 384, memory_bytes=plenty) == "hnsw"
    assert choose_kind(1_000_000, 384, memory_bytes=plenty) == "hnsw"
    assert choose_kind(1_000_001, 384, memory_bytes=plenty) == "ivf"
    assert choose_kind(1_000_000, 384, memory_bytes=little) == "ivfpq"  # 1.5 GB of vectors > half of 1 GB
    assert choose_kind(2_000_000, 384, memory_bytes=None) == "ivf"  # memory unknown: no compression
    assert default_params("ivf", 1_000_000, 384) == {"nlist": 4000, "nprobe": 500}
    assert default_params("ivfpq", 1_000_000, 384) == {"nlist": 4000, "nprobe": 500, "m": 48, "nbits": 8,
                                                       "refine": 16}
    assert default_params("ivf", 100, 384) == {"nlist": 2, "nprobe": 2}  # every list trained on >= 39 vectors
    assert default_params("hnsw", 10, 8) == {"M": 32, "ef_construction": 200, "ef_search": 128}


def test_exact_faiss_top_k_equals_exact_search(faiss, corpus, tmp_path):
    vectors, queries, exact = corpus
    index = opened(faiss, tmp_path, vectors, "flat")
    assert type(index._index).__name__ == "IndexFlatIP"
    for q, (want_rows, want_scores) in zip(queries, exact, strict=True):
        rows, scores = index.search(q, 10, vectors=vectors)
        np.testing.assert_array_equal(rows, want_rows)
        np.testing.assert_allclose(scores, want_scores, rtol=1e-6)


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_approximate_indexes_recall_at_least_95_percent_of_exact_top_10(faiss, corpus, tmp_path, kind):
    vectors, queries, exact = corpus
    index = opened(faiss, tmp_path, vectors, kind)
    assert recall_at_10(index, vectors, queries, exact) >= 0.95
    rows, scores = index.search(queries[0], 10, vectors=vectors)
    np.testing.assert_allclose(scores, vectors[rows] @ queries[0], rtol=1e-6)  # exact cosines, best first
    assert list(scores) == sorted(scores, reverse=True)


def test_ivfpq_candidates_rescored_exactly_recall_at_least_95_percent(faiss, corpus, tmp_path):
    vectors, queries, exact = corpus
    index = opened(faiss, tmp_path, vectors, "ivfpq")
    assert index.config.params == {"nlist": 512, "nprobe": 64, "m": 4, "nbits": 8, "refine": 16}
    assert len(index.candidates(queries[0], 10)) > 10  # refine x k candidates, re-scored from the vectors
    assert recall_at_10(index, vectors, queries, exact) >= 0.95


def test_a_wider_search_finds_more(faiss, corpus, tmp_path):
    vectors, queries, exact = corpus
    narrow = recall_at_10(opened(faiss, tmp_path, vectors, "ivf", nprobe=1), vectors, queries, exact)
    wide = recall_at_10(opened(faiss, tmp_path, vectors, "ivf", nprobe=64), vectors, queries, exact)
    assert narrow < wide


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_more_results_asked_than_vectors_and_none_asked(faiss, tmp_path, kind):
    vectors = clustered(50, seed=3)
    index = opened(faiss, tmp_path, vectors, kind, **({"nprobe": 2} if kind == "ivf" else {}))
    rows, _ = index.search(vectors[0], 100, vectors=vectors)
    assert sorted(rows) == list(range(50)) and rows[0] == 0  # every vector, the query itself first
    rows, scores = index.search(vectors[0], 0, vectors=vectors)
    assert len(rows) == len(scores) == 0


def test_the_same_vectors_build_the_same_file(faiss, tmp_path):
    vectors = clustered(2_000, seed=4)
    build(vectors, tmp_path / "a.faiss", "ivf")
    build(vectors, tmp_path / "b.faiss", "ivf")
    assert (tmp_path / "a.faiss").read_bytes() == (tmp_path / "b.faiss").read_bytes()


def test_ivf_lists_are_memory_mapped(faiss, tmp_path):
    vectors = clustered(2_000, seed=5)
    index = opened(faiss, tmp_path, vectors, "ivf")
    lists = faiss.extract_index_ivf(index._index).invlists
    assert type(lists).__name__ != "ArrayInvertedLists"  # read from the file's pages, not copied into memory


@pytest.mark.parametrize("config, match", [
    ({"kind": "lsh", "params": {}, "faiss_version": "1"}, "unknown FAISS index type 'lsh'"),
    ({"kind": "hnsw", "params": {"M": 32}, "faiss_version": "1"}, "hnsw takes the parameters"),
    ({"kind": "ivf", "params": {"nlist": 8, "nprobe": 0}, "faiss_version": "1"}, "'nprobe' is 0"),
    ({"kind": "ivf", "params": {"nlist": 8, "nprobe": True}, "faiss_version": "1"}, "'nprobe' is True"),
    ({"kind": "flat", "params": {}}, "is not"),
])
def test_a_bad_faiss_description_is_refused(config, match):
    with pytest.raises(ValueError, match=match):
        FaissConfig.from_json(config)
