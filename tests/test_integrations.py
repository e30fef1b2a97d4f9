"""The LangChain and LlamaIndex components in each framework's own idiom, on the bundled tiny model."""

from __future__ import annotations

import pytest

from tests.helpers.cli import TINY, run
from tests.helpers.documents import _folder


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("integrations")
    assert run("index", str(_folder(tmp)), "--out", str(tmp / "ix")).returncode == 0
    return str(tmp / "ix")


@pytest.mark.model
def test_an_lcel_chain_retrieves_and_answers_with_citations(index):
    pytest.importorskip("langchain_core", reason="needs the [langchain] extra")
    from langchain_core.runnables import RunnablePassthrough

    from ragfunnel.integrations.langchain import RagfunnelAnswer, RagfunnelRetriever

    retriever = RagfunnelRetriever(index=index, top_k=3, search_options={"post_ranker": TINY})
    docs = retriever.invoke("Who is the lighthouse keeper?")
    assert 0 < len(docs) <= 3 and all(d.page_content and d.metadata["source"] for d in docs)
    chain = {"documents": retriever, "question": RunnablePassthrough()} | RagfunnelAnswer(
        method="fb", light=TINY, strong=TINY, budget=200, samples=2)
    out = chain.invoke("Who is the lighthouse keeper?")
    assert out["answer"] and out["method"] in ("fb", "fb-f")
    assert out["citations"] and {c["file"] for c in out["citations"]} <= {d.metadata["source"] for d in docs}


@pytest.mark.model
def test_a_retriever_query_engine_with_the_fb_reranker(index):
    pytest.importorskip("llama_index.core", reason="needs the [llamaindex] extra")
    from llama_index.core.llms.mock import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine

    from ragfunnel.integrations.llamaindex import FBRAGReranker, RagfunnelRetriever

    retriever = RagfunnelRetriever(index, top_k=4, post_ranker=TINY)
    reranker = FBRAGReranker(light=TINY, samples=2, top_n=2)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM(), node_postprocessors=[reranker])
    response = engine.query("Who is the lighthouse keeper?")
    nodes = response.source_nodes
    assert len(nodes) == 2 and nodes[0].score >= nodes[1].score
    assert all(n.node.get_content() for n in nodes)
