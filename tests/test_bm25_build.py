"""The numpy BM25 builder against bm25s's own indexing, the reference it must reproduce."""

import bm25s
import numpy as np
import pytest

from ragfunnel.corpus import load_corpus
from ragfunnel.corpus.index_build import cluster_text, content_digests, document_tokens
from ragfunnel.errors import InputError
from ragfunnel.retrieve.bm25 import PLACEHOLDER, BM25Index, TokenIds, index_token_ids, tokenize, tokenize_ids
from ragfunnel.retrieve.fusion import best_k
from ragfunnel.text import word_windows
from ragfunnel.types import Document
from tests.conftest import HOTPOT

CORPUS = HOTPOT.with_name("hotpotqa_train_corpus.json")
EDGE_TEXTS = ["The cat sat on the mat", "the of and to", "fish fish fish river", "Cats cats CATS run",
              "!!", "a river of fish", "Running runners ran"]
EDGE_QUERIES = ["cat", "fish river river", "zebra", "zebra fish", "the of", "running cats on the river"]


def bm25s_reference(texts: list[str]) -> bm25s.BM25:
    """bm25s indexing the same terms itself, as BM25Index did before the numpy builder."""
    model = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    model.index([terms or [PLACEHOLDER] for terms in tokenize(texts)], show_progress=False)
    return model


def columns(model: bm25s.BM25) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """term -> (document indices, scores): the sparse matrix independent of how terms are numbered."""
    s = model.scores
    # bm25s appends "" to its vocabulary without giving it a column.
    return {term: (np.asarray(s["indices"][s["indptr"][i]:s["indptr"][i + 1]]),
                   np.asarray(s["data"][s["indptr"][i]:s["indptr"][i + 1]]))
            for term, i in model.vocab_dict.items() if term != ""}


def assert_same_matrix(got: bm25s.BM25, want: bm25s.BM25) -> None:
    got_columns, want_columns = columns(got), columns(want)
    assert set(got_columns) - set(want_columns) == set()
    for term, (docs, scores) in want_columns.items():
        np.testing.assert_array_equal(got_columns.get(term, (np.zeros(0),))[0], docs, err_msg=term)
        np.testing.assert_allclose(got_columns[term][1], scores, rtol=1e-6, err_msg=term)
    assert got.scores["num_docs"] == want.scores["num_docs"]


def assert_same_scores(index: BM25Index, reference: bm25s.BM25, queries: list[str], k: int) -> None:
    got = index.score(queries)
    for row, query in zip(got, queries, strict=True):
        terms = [t for t in tokenize([query])[0] if t in reference.vocab_dict]
        want = reference.get_scores(terms) if terms else np.zeros(len(index))
        np.testing.assert_allclose(row, want, rtol=1e-6, atol=1e-7, err_msg=query)
        np.testing.assert_array_equal(best_k(row, k)[0], best_k(want.astype(np.float64), k)[0], err_msg=query)


@pytest.fixture(scope="module")
def hotpot_passages() -> list[str]:
    if not CORPUS.exists():
        pytest.skip(f"shared data not found at {CORPUS}")
    docs = load_corpus(CORPUS)
    return [d.text[start:end] for d in docs for start, end in word_windows(d.text, 60)][:2000]


def test_real_passages_same_matrix_scores_and_top_k_as_bm25s(hotpot_passages):
    reference = bm25s_reference(hotpot_passages)
    index = BM25Index(hotpot_passages)
    assert_same_matrix(index._model, reference)
    rng = np.random.default_rng(0)
    queries = []
    for i in rng.integers(0, len(hotpot_passages), size=50).tolist():
        words = hotpot_passages[i].split()
        queries.append(" ".join(rng.choice(words, size=min(len(words), 5), replace=False).tolist()))
    assert_same_scores(index, reference, queries + ["Who directed the film?", "quantumzebra"], k=20)


def test_edge_cases_same_as_bm25s():
    # an all-stopword text, one with no word at all, repeated terms, a query term not in the vocabulary
    reference = bm25s_reference(EDGE_TEXTS)
    index = BM25Index(EDGE_TEXTS)
    assert_same_matrix(index._model, reference)
    assert_same_scores(index, reference, EDGE_QUERIES, k=len(EDGE_TEXTS))
    assert PLACEHOLDER in index._model.vocab_dict
    assert PLACEHOLDER not in BM25Index(["fish river"])._model.vocab_dict


def test_save_and_load_keep_the_scores(tmp_path):
    index = index_token_ids(tokenize_ids(EDGE_TEXTS))
    index.save(tmp_path / "bm25")
    loaded = BM25Index.load(tmp_path / "bm25")
    assert len(loaded) == len(EDGE_TEXTS)
    np.testing.assert_array_equal(loaded.score(EDGE_QUERIES), index.score(EDGE_QUERIES))


def test_cluster_tokens_joined_from_documents_equal_tokenising_the_cluster_text():
    docs = [Document(str(i), f"Title {i}", text) for i, text in enumerate(EDGE_TEXTS)]
    clusters = [[3, 0], [1], [6, 2, 5], [4]]
    joined = document_tokens(docs).joined(clusters)
    texts = [cluster_text(docs, c) for c in clusters]
    by_text = tokenize(texts)
    terms = {i: t for t, i in joined.vocab.items()}
    rows = np.split(joined.ids, np.cumsum(joined.lengths)[:-1])
    assert [[terms[int(i)] for i in row] for row in rows] == by_text
    assert_same_matrix(index_token_ids(joined)._model, bm25s_reference(texts))
    np.testing.assert_array_equal(index_token_ids(joined).score(EDGE_QUERIES), BM25Index(texts).score(EDGE_QUERIES))


def test_real_clusters_equal_bm25_over_cluster_text(hotpot_passages):
    docs = [Document(str(i), "", text) for i, text in enumerate(hotpot_passages[:600])]
    order = np.random.default_rng(1).permutation(len(docs)).tolist()
    clusters = [order[start:start + 7] for start in range(0, len(order), 7)]
    texts = [cluster_text(docs, c) for c in clusters]
    assert_same_matrix(index_token_ids(document_tokens(docs).joined(clusters))._model, bm25s_reference(texts))


def test_all_empty_texts_index_to_zero_scores():
    index = BM25Index(["the", "of and"])
    assert not index.score(["the cat"]).any()


def test_mismatched_token_ids_are_refused():
    with pytest.raises(InputError, match="disagree"):
        TokenIds(np.zeros(3, dtype=np.int32), np.array([1, 1]), {"a": 0})
    with pytest.raises(InputError, match="zero texts"):
        index_token_ids(tokenize_ids([]))


def test_content_checksum_tells_field_boundaries_apart():
    # The checksum decides whether an index is up to date; moving text between fields must change it.
    variants = [[Document("a", "bc", "d")], [Document("ab", "c", "d")], [Document("a", "bc", "d", ("e",))],
                [Document("a", "bc", "d e")], [Document("a", "bc", "d"), Document("e", "", "f")]]
    digests = {content_digests(docs)[0] for docs in variants}
    assert len(digests) == len(variants)
    assert content_digests([Document("a", "bc", "d")])[0] == content_digests([Document("a", "bc", "d")])[0]
