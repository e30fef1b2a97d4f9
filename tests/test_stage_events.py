"""Every method reports each stage once, complete, when it is done, and says when the long ones begin: what a
listener streams is the final trace, with no stage sent twice or renamed afterwards."""

import pytest

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.types import Document, StageTrace, on_stage, stage_detail, stage_done
from tests.helpers.methods import CONTEXT, Listener, scripted, streamed
from tests.helpers.rankers import WordOverlap

QUESTION = "Who kept the Gull Rock lamp?"


@pytest.mark.parametrize("method, options", [
    ("op", {}), ("vanilla", {}), ("fb", {"stage1_budget": 40, "samples": 2}),
    ("fb-f", {"stage1_budget": 40, "samples": 2}), ("auto", {"prefer": "quality"}), ("auto", {}),
])
def test_a_context_methods_streamed_stages_are_its_trace(method, options):
    listener, p = streamed(lambda: make_method(method, light=FakeLLM(scripted()), strong=FakeLLM(scripted()),
                                               budget=25, chunk_words=10, **options).run(QUESTION, CONTEXT))
    assert listener.done == listener.final(p)
    generating = [s.name for s in p.trace.stages if s.input_tokens]
    assert set(generating) <= set(listener.started)  # every model call said when it began


def test_long_contexts_streamed_stages_are_its_trace():
    listener, p = streamed(lambda: make_method("lc", strong=FakeLLM(scripted())).run(QUESTION, CONTEXT))
    assert listener.done == listener.final(p) and "generate" in listener.started


@pytest.mark.parametrize("answer", ["unanswerable", "Martha Quill"])
def test_self_routes_fallback_streams_as_lcs_own_stages(answer):
    def reply(prompt, i):
        return answer if "unanswerable" in prompt else "Martha Quill"
    listener, p = streamed(lambda: make_method("self-route", strong=FakeLLM(reply), budget=25, chunk_words=10)
                           .run(QUESTION, CONTEXT))
    assert listener.done == listener.final(p)


DOCS = [Document("gull", "Gull Rock", "The lighthouse on Gull Rock was built of granite in 1871."),
        Document("quill", "Martha Quill", "Martha Quill kept the Gull Rock lamp for thirty years."),
        Document("ferry", "Port Ellis", "The island ferry runs twice daily from Port Ellis harbour.")]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("stages") / "ix"
    build_index(DOCS, root, source="test")
    return CorpusIndex(root)


@pytest.mark.parametrize("method, options, replies", [
    ("funnel", {"pre_ranker": WordOverlap(), "post_ranker": WordOverlap(), "top_documents": 2}, ["Martha Quill"]),
    ("drag", {"documents": 2}, ["Martha Quill"]),
    ("iterdrag", {"documents": 1}, ["Follow up: Who kept the lamp?", "Intermediate answer: Martha Quill",
                                    "So the final answer is: Martha Quill"]),
])
def test_a_corpus_methods_streamed_stages_are_its_trace(index, method, options, replies):
    it = iter(replies * 4)
    llm = FakeLLM(lambda prompt, i: next(it))
    listener, p = streamed(lambda: make_method(method, index=index, strong=llm, **options).run(QUESTION))
    assert listener.done == listener.final(p)


def test_extra_detail_is_on_the_stage_before_anyone_sees_it():
    listener = Listener()
    with on_stage(listener.on_done), stage_detail(rung="op"):
        stage = stage_done(StageTrace(name="generate"))
    assert stage.detail == {"rung": "op"} and '"rung": "op"' in listener.done[0]
