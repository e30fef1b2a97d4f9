import math

import bm25s
import numpy as np
import pytest

from ragfunnel.errors import InputError
from ragfunnel.retrieve.bm25 import BM25Index, tokenize

DOCS = ["the cat sat on the mat", "dogs chase cats", "a river of fish", "fish fish in the river river"]


def lucene(tf, df, dl, avgdl, n, k1=1.5, b=0.75):
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))


def test_tokenize_lowercases_stems_and_drops_stopwords():
    assert tokenize(["The Cats are running to the river banks"]) == [["cat", "run", "river", "bank"]]


def test_scores_match_hand_computed_lucene_bm25():
    # Terms after tokenisation: [cat sat mat] [dog chase cat] [river fish] [fish fish river river]
    index = BM25Index(DOCS)
    avgdl = (3 + 3 + 2 + 4) / 4
    scores = index.score(["cat", "fish river"])
    assert scores.shape == (2, 4)
    cat = lucene(1, 2, 3, avgdl, 4)
    np.testing.assert_allclose(scores[0], [cat, cat, 0, 0], rtol=1e-5)
    fish_river_2 = lucene(1, 2, 2, avgdl, 4) * 2  # fish and river share df=2, tf=1 in doc 2
    fish_river_3 = lucene(2, 2, 4, avgdl, 4) * 2
    np.testing.assert_allclose(scores[1], [0, 0, fish_river_2, fish_river_3], rtol=1e-5)


def test_many_queries_in_one_call_equal_bm25s_one_by_one():
    index = BM25Index(DOCS)
    queries = ["cats on mats", "river river fish", "zebra", "dog and cat by the river"]
    batch = index.score(queries)
    for row, query in zip(batch, queries, strict=True):
        terms = [t for t in tokenize([query])[0] if t in index._model.vocab_dict]
        expected = index._model.get_scores(terms) if terms else np.zeros(len(DOCS))
        np.testing.assert_allclose(row, expected, rtol=1e-6)


def test_unknown_terms_score_zero():
    assert not BM25Index(DOCS).score(["zebra quantum"]).any()


def test_repeated_query_terms_count_each_time():
    index = BM25Index(DOCS)
    once, twice = index.score(["cat", "cat cat"])
    np.testing.assert_allclose(twice, 2 * once)


def test_empty_index_is_refused():
    with pytest.raises(InputError):
        BM25Index([])


def test_reference_library_agrees_on_the_formula():
    # Guards our reading of bm25s: its lucene variant is the formula above.
    model = bm25s.BM25(method="lucene")
    model.index([["a", "b"], ["b", "c", "c"]], show_progress=False)
    got = model.get_scores(["c"])
    np.testing.assert_allclose(got, [0, lucene(2, 1, 3, 2.5, 2)], rtol=1e-5)


def test_top_k_many_equals_the_dense_scores_best_k_without_building_them():
    from ragfunnel.retrieve.bm25 import BM25Index
    from ragfunnel.retrieve.fusion import best_k

    texts = ["the cat sat on the mat", "a dog chased the cat", "birds sing at dawn", "cats and dogs",
             "the mat was red", "stopwords only: the a an"]
    index = BM25Index(texts)
    queries = ["cat on a mat", "dawn birds", "zebra", "dogs and cats chased"]
    indices, scores = index.top_k_many(queries, 3)
    dense = index.score(queries)
    for q in range(len(queries)):
        want_i, want_s = best_k(dense[q], 3)
        assert list(indices[q]) == list(want_i) and list(scores[q]) == pytest.approx(list(want_s))
    assert index.top_k_many(queries, 99)[0].shape == (4, 6)
    assert list(index.top_k("zebra", 2)[1]) == [0.0, 0.0]
