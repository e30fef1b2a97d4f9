"""Every method reports each stage once, complete, when it is done, and says when the long ones begin: what a
listener streams is the final trace, with no stage sent twice or renamed afterwards."""

import ast
import time
from pathlib import Path

import pytest

import ragfunnel
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.types import Document, Stage, on_stage, stage, stage_detail
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
    assert listener.started == [s.name for s in p.trace.stages]  # each said when it began, in order


def test_long_contexts_streamed_stages_are_its_trace():
    listener, p = streamed(lambda: make_method("lc", strong=FakeLLM(scripted())).run(QUESTION, CONTEXT))
    assert listener.done == listener.final(p) and listener.started == ["generate", "confidence"]


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
    with on_stage(listener.on_done), stage_detail(rung="op"), stage(Stage.GENERATE) as trace:
        pass
    assert trace.detail == {"rung": "op"} and '"rung": "op"' in listener.done[0]


def test_a_stage_that_raises_is_never_reported_done():
    listener = Listener()
    with on_stage(listener.on_done, started=listener.started.append), pytest.raises(ValueError):
        with stage(Stage.RETRIEVE):
            raise ValueError("the index is gone")
    assert listener.started == ["retrieve"] and listener.done == []


def test_a_stage_is_timed_from_its_start_to_its_end():
    with stage(Stage.CHOOSE) as trace:
        time.sleep(0.02)
    assert trace.seconds >= 0.02


def _stage_name_literals(tree: ast.AST) -> list[str]:
    """Where a stage is named by a string: ``stage("...")``, ``StageTrace(...)`` made outside ``types.py``, or a
    stage's name compared with a string that is a stage's name."""
    names = {s.value for s in Stage}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "StageTrace":
                found.append(f"line {node.lineno}: StageTrace(...)")
            elif node.func.id == "stage" and node.args and isinstance(node.args[0], ast.Constant | ast.JoinedStr):
                found.append(f"line {node.lineno}: stage({ast.unparse(node.args[0])})")
        if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value in names
                                                 for c in [node.left, *node.comparators]):
            if "name" in ast.unparse(node):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_stage_is_named_by_a_string_outside_the_enum():
    src = Path(ragfunnel.__file__).parent
    found = {str(path.relative_to(src)): hits for path in sorted(src.rglob("*.py"))
             if path.name != "types.py" and (hits := _stage_name_literals(ast.parse(path.read_text())))}
    assert found == {}


def test_the_literal_check_catches_a_stage_named_by_hand():
    tree = ast.parse('with stage("retrieve") as s: pass\nStageTrace(name=Stage.RETRIEVE)\nok = s.name == "abstain"')
    assert len(_stage_name_literals(tree)) == 3
