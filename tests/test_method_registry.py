"""One registry for both kinds of method: names, kinds, options, and one call shape per kind (no model)."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import ragfunnel
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.errors import ConfigError
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import (
    CONTEXT_METHODS,
    CORPUS_METHODS,
    METHODS,
    OVER_INDEX,
    described,
    make_method,
    method_kind,
    options_of,
)
from tests.helpers.corpora import DOCS
from tests.helpers.rankers import WordOverlap

CONTEXT = "Martha Quill kept the Gull Rock light. The ferry runs twice daily from Port Ellis."


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry") / "ix"
    build_index(DOCS, root, source="test")
    return CorpusIndex(root)


def answering(reply="Martha Quill"):
    return FakeLLM(lambda prompt, i: reply)


def test_every_method_has_one_kind():
    assert list(METHODS) == [*CONTEXT_METHODS, *CORPUS_METHODS]
    assert CORPUS_METHODS == ("funnel", "drag", "iterdrag")
    assert {method_kind(m) for m in CONTEXT_METHODS} == {"context"}
    assert {method_kind(m) for m in CORPUS_METHODS} == {"corpus"}
    with pytest.raises(ConfigError, match="unknown method 'magic'; valid methods: auto, .*, iterdrag"):
        method_kind("magic")


def test_the_models_and_the_index_are_no_option_of_a_configuration():
    assert not any({"index", "light", "strong"} & set(options_of(m)) for m in METHODS)
    assert options_of("iterdrag") == ["task", "max_tokens", "documents", "shots", "demonstrations", "iterations"]


@pytest.mark.parametrize("name, options, match", [
    ("drag", {"budget": 10}, "method drag does not take budget; it takes task, max_tokens, documents, shots"),
    ("op", {"documents": 2}, "documents goes with index and method drag or iterdrag"),
])
def test_options_are_checked_the_same_way_for_both_kinds(index, name, options, match):
    with pytest.raises(ConfigError, match=match):
        make_method(name, index=index if name in CORPUS_METHODS else None, **options)


def test_a_method_and_its_source_must_match(index):
    with pytest.raises(ConfigError, match="^method drag answers from a corpus index; pass index instead of context$"):
        make_method("drag")
    with pytest.raises(ConfigError, match="^index answers with method funnel, drag, iterdrag, fb; op reads context$"):
        make_method("op", index=index)


@pytest.mark.parametrize("name", CORPUS_METHODS)
def test_every_corpus_method_answers_through_one_call_shape(index, name):
    options = {"pre_ranker": WordOverlap(), "post_ranker": WordOverlap()} if name == "funnel" else {"documents": 1}
    reply = "So the final answer is: Martha Quill" if name == "iterdrag" else "Martha Quill"
    method = make_method(name, index=index, strong=answering(reply), task="qa", **options)
    p = method.run("Who kept the Gull Rock light?", choices=None)
    assert p.answer == "Martha Quill" and p.method == name and p.chunks_used


@pytest.mark.parametrize("name", ["drag", "iterdrag"])
def test_drag_and_iterdrag_refuse_choices(index, name):
    llm = answering()
    method = make_method(name, index=index, strong=llm)
    with pytest.raises(ConfigError, match=f"{name} answers open questions and takes no choices"):
        method.run("Who kept the light?", choices=["Martha Quill", "Port Ellis"])
    assert llm.calls == []


def test_funnel_answers_a_multiple_choice_question(index):
    llm = answering("B")
    p = ragfunnel.answer("Who kept the light?", index=index.root, task="choice", choices=["Port Ellis", "Martha Quill"],
                         strong=llm, pre_ranker=WordOverlap(), post_ranker=WordOverlap())
    assert p.method == "funnel" and "Martha Quill" in llm.calls[0][0]


def test_answer_reaches_both_kinds_from_exactly_one_source(index):
    p = ragfunnel.answer("Who kept the light?", CONTEXT, method="op", strong=answering(), budget=100)
    assert (p.method, p.answer) == ("op", "Martha Quill")
    p = ragfunnel.answer("Who kept the light?", index=index, method="drag", strong=answering(), documents=1)
    assert (p.method, p.answer) == ("drag", "Martha Quill")
    for sources in ({}, {"context": CONTEXT, "index": index}):
        with pytest.raises(ConfigError, match="pass exactly one"):
            ragfunnel.answer("Who?", **sources)
    with pytest.raises(ConfigError, match="pass index instead of context"):
        ragfunnel.answer("Who?", CONTEXT, method="iterdrag")


def test_search_opens_an_index_directory_once_per_process(monkeypatch, tmp_path):
    import ragfunnel.api as api

    opened = []

    class Opened:
        def __init__(self, root, remote_embedder=None):
            opened.append(root)
            self.root = root

    monkeypatch.setattr(api, "CorpusIndex", Opened)
    monkeypatch.setattr(api, "flat_search", lambda index, question, k, exact: (index, question, k))
    api._opened.cache_clear()
    first = api.search(tmp_path, "Who kept the light?", funnel=False)
    again = api.search(str(tmp_path) + "/", "And then?", funnel=False, top_k=2)
    assert opened == [str(tmp_path.resolve())]
    assert first[0].root == str(tmp_path.resolve()) and first[1:] == ("Who kept the light?", 4)
    assert again[0] is first[0] and again[2] == 2
    api._opened.cache_clear()


def _readme_methods() -> dict[str, tuple[str, str]]:
    """The README's table of methods: each name's 'reads' and 'what it does' cells."""
    readme = (Path(ragfunnel.__file__).parents[2] / "README.md").read_text()
    rows = re.findall(r"^\| `([a-z][a-z-]*)`[^|]* \| ([^|]+) \| (.+) \|$", readme, re.M)
    return {name: (reads, what) for name, reads, what in rows}


def test_the_readme_describes_each_method_as_the_registry_does():
    reads = {"context": "a context", "corpus": "an index"}
    want = {name: (reads[method_kind(name)] + (", or an index" if name in OVER_INDEX else ""), described(name))
            for name in METHODS}
    assert _readme_methods() == want


def test_the_method_option_and_the_service_describe_each_method_from_the_registry():
    from ragfunnel.cli.main import main

    shown = " ".join(CliRunner().invoke(main, ["ask", "--help"], terminal_width=10_000).output.split())
    assert all(f"{name}: {' '.join(described(name).split())}" in shown for name in METHODS)
