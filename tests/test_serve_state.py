"""What the service holds is one typed state, and no request changes an object other requests share: a
search's sizes are arguments of that search, not settings of the kept retriever (scripted rankers, no model)."""

from __future__ import annotations

import pytest

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from tests.helpers.corpora import corpus
from tests.helpers.rankers import WordOverlap

pytest.importorskip("fastapi", reason="needs the [serve] extra")
from ragfunnel.serve.answering import ServiceState  # noqa: E402
from tests.helpers.serve import served  # noqa: E402


@pytest.fixture
def indexed(tmp_path):
    build_index(corpus(), tmp_path / "ix", source="test")
    return str(tmp_path / "ix")


@pytest.fixture
def word_rankers(monkeypatch):
    """Both funnel rankers scripted, wherever the service or the API loads them."""
    monkeypatch.setattr("ragfunnel.retrieve.rerank.load_pre_ranker", lambda *a, **k: WordOverlap())
    monkeypatch.setattr("ragfunnel.methods.funnel.load_pre_ranker", lambda *a, **k: WordOverlap())
    monkeypatch.setattr("ragfunnel.retrieve.attention.load_post_ranker", lambda *a, **k: WordOverlap())


def test_searches_of_different_sizes_on_one_served_index_leave_its_retriever_as_it_was(indexed, word_rankers):
    with served(indexes={"lights": indexed}) as c:
        state = c.app.state.service
        assert isinstance(state, ServiceState) and set(state.indexes) == {"lights"}
        question = {"index": "lights", "question": "Where was Martha Quill born?"}
        one = c.post("/v1/search", json={**question, "top_k": 1})
        assert one.status_code == 200, one.text
        retriever = state.retrievers["lights"]
        before = dict(vars(retriever))
        three = c.post("/v1/search", json={**question, "top_k": 3}).json()
        again = c.post("/v1/search", json={**question, "top_k": 1}).json()
        assert len(one.json()["results"]) == 1 and len(three["results"]) == 3 and len(again["results"]) == 1
        assert again["results"] == one.json()["results"]
        assert state.retrievers["lights"] is retriever and vars(retriever) == before


def test_the_api_keeps_one_funnel_per_index_and_passes_each_search_its_sizes(indexed, word_rankers):
    from ragfunnel import api

    api._funnel.cache_clear()
    index = CorpusIndex(indexed)
    first = api.search(index, "Where was Martha Quill born?", top_k=1)
    kept = api._funnel(index, api.DEFAULT_PRE_RANKER, api.DEFAULT_LIGHT, None)
    before = dict(vars(kept))
    wider = api.search(index, "Where was Martha Quill born?", top_k=3)
    fewer_documents = api.search(index, "Where was Martha Quill born?", top_k=3, top_documents=2)
    assert len(first.results) == 1 and len(wider.results) == 3
    assert fewer_documents.stages[1].n_out == 2 and len(fewer_documents.results) == 2  # a passage each
    assert api._funnel.cache_info().currsize == 1 and vars(kept) == before
    api._funnel.cache_clear()


def test_a_funnel_size_below_one_is_refused_per_search(indexed, word_rankers):
    from ragfunnel.corpus.funnel import FunnelRetriever
    from ragfunnel.errors import ConfigError

    retriever = FunnelRetriever(CorpusIndex(indexed), pre_ranker=WordOverlap(), post_ranker=WordOverlap())
    with pytest.raises(ConfigError, match="at least 1"):
        retriever.search("Gull Rock?", top_passages=0)


def test_an_unknown_index_or_document_is_404_naming_what_there_is(indexed):
    with served(indexes={"lights": indexed}) as c:
        search = c.post("/v1/search", json={"index": "harbour", "question": "q?"})
        assert search.status_code == 404 and search.json()["detail"] == "no index 'harbour'; this server has: lights"
        answer = c.post("/v1/answer", json={"question": "q?", "document_id": "0123456789abcdef"})
        assert answer.status_code == 404 and "store one with POST /v1/documents" in answer.json()["detail"]
