"""`ask --index` with DRAG/IterDRAG options and `scale demos`, as a user runs them (no model loads)."""

import json

import pytest
from click.testing import CliRunner

from ragfunnel.cli.main import main
from ragfunnel.corpus.index_build import build_index
from ragfunnel.llm import FakeLLM
from ragfunnel.llm.registry import registered
from tests.helpers.corpora import DOCS


@pytest.fixture
def index_dir(tmp_path):
    build_index(DOCS, tmp_path / "ix", source="test")
    return tmp_path / "ix"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_drag_demonstrations_hold_each_question_its_answer_and_documents(index_dir, tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text(json.dumps({"id": "t1", "question": "Who kept the Gull Rock light?", "answers": ["Martha Quill"]})
                     + "\n")
    out = tmp_path / "demos.jsonl"
    result = run("scale", "demos", str(train), "--index", str(index_dir), "--out", str(out), "--documents", "2")
    assert result.exit_code == 0, result.output
    (demo,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert demo["question"] == "Who kept the Gull Rock light?" and demo["answer"] == "Martha Quill"
    assert len(demo["documents"]) == 2 and demo["documents"][0]["title"] in ("Martha Quill", "Gull Rock")


@pytest.mark.parametrize("args, message", [
    (["--method", "drag", "--iterations", "2"], "--method drag does not take --iterations"),
    (["--method", "funnel", "--shots", "1"], "--method funnel does not take --shots"),
    (["--method", "op"], "--index answers with --method funnel, drag, iterdrag, fb; op reads --context"),
    (["--method", "drag", "--shots", "3"], "--shots 3 needs 3 demonstrations but only 0 were given"),
])
def test_corpus_methods_refuse_options_they_do_not_take(index_dir, args, message):
    result = run("ask", "Who kept the light?", "--index", str(index_dir), *args)
    assert result.exit_code == 1 and message in result.output, result.output


def test_scaling_options_need_an_index(tmp_path):
    context = tmp_path / "c.txt"
    context.write_text("Martha Quill kept the Gull Rock light.")
    result = run("ask", "Who kept the light?", "--context", str(context), "--documents", "3")
    assert result.exit_code == 1 and "--documents goes with --index" in result.output
    result = run("ask", "Who kept the light?", "--context", str(context), "--method", "iterdrag")
    assert result.exit_code == 1 and "pass --index instead of --context" in result.output


def test_ask_answers_with_drag_from_the_index(index_dir):
    with registered("fake:ask", FakeLLM(lambda prompt, i: "Martha Quill")):
        result = run("ask", "Who kept the Gull Rock light?", "--index", str(index_dir), "--method", "drag",
                     "--documents", "1", "--strong", "fake:ask", "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["answer"] == "Martha Quill"
        refused = run("ask", "Who kept the light?", "--index", str(index_dir), "--method", "iterdrag",
                      "--strong", "fake:ask", "--choice", "Martha Quill", "--choice", "Port Ellis")
    assert refused.exit_code == 1
    assert "iterdrag answers open questions and takes no --choice; --method funnel" in refused.output
