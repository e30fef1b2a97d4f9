"""FunnelRAG's progressive retrieval with scripted rankers (no model)."""

import numpy as np
import pytest

from ragfunnel.corpus.funnel import FunnelRetriever, default_top_clusters
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_manifest import IndexConfig
from ragfunnel.errors import ConfigError
from tests.helpers.corpora import DOCS
from tests.helpers.rankers import WordOverlap


@pytest.fixture
def index(tmp_path):
    build_index(DOCS, tmp_path / "ix", source="test")
    return CorpusIndex(tmp_path / "ix")


def test_three_stages_narrow_quantity_and_refine_granularity(index):
    pre, post = WordOverlap(), WordOverlap()
    funnel = FunnelRetriever(index, pre_ranker=pre, post_ranker=post, top_clusters=2, top_documents=2,
                             top_passages=1, passage_words=8)
    result = funnel.search("Who wrote diaries about puffins?")
    assert [s.name for s in result.stages] == ["retrieval", "pre_ranking", "post_ranking"]
    retrieval, pre_ranking, post_ranking = result.stages
    assert retrieval.n_in == index.n_clusters and retrieval.n_out == 2
    assert pre_ranking.n_in == retrieval.detail["documents"] and pre_ranking.n_out == 2
    assert all(len(t.split()) <= 8 + 3 for t in post.seen[0])  # passages of 8 words (+ the title)
    (hit,) = result.results
    assert (hit.id, hit.title) == ("quill", "Martha Quill") and "puffins" in hit.text


def test_passages_beyond_the_prompt_cap_are_dropped_from_the_lowest_ranked_documents(index):
    post = WordOverlap()
    FunnelRetriever(index, pre_ranker=WordOverlap(), post_ranker=post, top_clusters=3, top_documents=3,
                    passage_words=4, max_passages=5).search("Who kept the light on Gull Rock?")
    assert len(post.seen[0]) == 5


def test_default_cluster_count_scales_with_the_corpus():
    assert default_top_clusters(3) == 3 and default_top_clusters(100) == 5
    assert default_top_clusters(1_000) == 50 and default_top_clusters(600_000) == 80


def test_sizes_must_be_positive(index):
    with pytest.raises(ConfigError, match="at least 1"):
        FunnelRetriever(index, pre_ranker=WordOverlap(), post_ranker=WordOverlap(), top_documents=0)


@pytest.mark.model
def test_stored_document_vectors_give_the_scores_of_encoding_at_query_time(tmp_path):
    from ragfunnel.retrieve.rerank import BiEncoderPreRanker

    build_index(DOCS, tmp_path / "ix", IndexConfig(embed_documents=True), source="test")
    index = CorpusIndex(tmp_path / "ix")
    assert index.manifest.document_vectors and index.document_vectors.shape == (len(DOCS), 384)
    docs = [index.document(i) for i in range(len(DOCS))]
    assert [d.position for d in docs] == [0, 1, 2, 3] and docs[1] == DOCS[1]  # position is not identity
    question = "Who wrote diaries about puffins?"
    stored = BiEncoderPreRanker(stored=index.document_vectors)
    assert np.allclose(stored.score(question, docs), BiEncoderPreRanker().score(question, docs), atol=1e-5)
    assert int(np.argmax(stored.score(question, docs))) == 1
    # The vectors are looked up, not recomputed: a stored row that is the question's own embedding wins.
    planted = np.array(index.document_vectors)
    (planted[3],) = stored.embedder.encode([question])
    assert int(np.argmax(BiEncoderPreRanker(stored=planted).score(question, docs))) == 3
    # Documents from elsewhere (no position) are encoded.
    assert int(np.argmax(BiEncoderPreRanker(stored=planted).score(question, DOCS))) == 1


def test_an_index_without_document_vectors_is_rebuilt_only_when_asked(index, tmp_path):
    assert not index.manifest.document_vectors and index.document_vectors is None
    with pytest.raises(ConfigError, match="set force to rebuild it"):
        build_index(DOCS, tmp_path / "ix", IndexConfig(embed_documents=True), source="test")
