"""Hostile or careless command-line inputs end in one line and a failing exit, never in a Python traceback
or, worse, in exit 0 with lost work.

Run in-process with click's CliRunner (no model: nothing here gets as far as generating).
"""

from __future__ import annotations

import errno
import json

import click
import pytest
from click.testing import CliRunner

from ragfunnel.cli.common import Command
from ragfunnel.corpus.index_build import build_index
from ragfunnel.errors import InputError
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.methods.demonstrations import Demonstration, load_demonstrations, save_demonstrations
from ragfunnel.types import Document
from tests.helpers.cli import invoke, one_line
from tests.helpers.runs import DRAG_GRID, write_run


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "Where was Martha Quill born?", "answers": ["Port Ellis"],
                                "context": "Martha Quill was born in Port Ellis."}) + "\n")
    return path


@pytest.fixture
def index_dir(tmp_path):
    docs = [Document("a", "Gull Rock", "The lighthouse on Gull Rock was built of granite."),
            Document("b", "Martha Quill", "Martha Quill kept the Gull Rock light for thirty years."),
            Document("d", "Port Ellis", "Port Ellis is the harbour town where Martha Quill was born.")]
    build_index(docs, tmp_path / "ix", source="test")
    return tmp_path / "ix"


def test_an_out_that_is_a_file_is_named(tmp_path, dataset, index_dir):
    taken = tmp_path / "taken"
    taken.write_text("mine")
    one_line(invoke("eval", dataset, "--out", taken), f"--out {taken} is a file, but a directory is needed")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "title": "A", "text": "Some text here."}) + "\n")
    one_line(invoke("index", corpus, "--out", taken), "is a file, but a directory is needed")
    one_line(invoke("funnel", "distill", index_dir, "--questions", dataset, "--out", taken),
             "is a file, but a directory is needed")
    one_line(invoke("scale", "demos", dataset, "--index", index_dir, "--out", tmp_path),
             f"--out {tmp_path} is a directory, but a file is needed")
    assert taken.read_text() == "mine"


def test_an_out_in_folders_that_do_not_exist_yet_is_made(tmp_path, dataset, index_dir):
    out = tmp_path / "demos" / "new" / "musique.jsonl"  # the README's own example, on a fresh clone
    result = invoke("scale", "demos", dataset, "--index", index_dir, "--documents", "2", "--out", out)
    assert result.exit_code == 0, result.output
    assert [d.question for d in load_demonstrations(out)] == ["Where was Martha Quill born?"]


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_demos_refuse_a_non_positive_limit_and_never_shorten_a_file(tmp_path, dataset, index_dir, limit):
    out = tmp_path / "demos.jsonl"
    save_demonstrations([Demonstration(f"Q{i}?", "A", id=f"old{i}") for i in range(3)], out)
    before = out.read_bytes()
    one_line(invoke("scale", "demos", dataset, "--index", index_dir, "--limit", limit, "--out", out),
             "Invalid value for '--limit'", code=2)
    assert out.read_bytes() == before
    result = invoke("scale", "demos", dataset, "--index", index_dir, "--limit", "1", "--out", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(before)  # the new demonstration is added, nothing dropped
    assert [d.id for d in load_demonstrations(out)] == ["old0", "old1", "old2", "q1"]


def damage(path):
    path.write_bytes(b'{"dataset": "x", \xff')


def test_a_damaged_config_json_is_named(tmp_path, dataset):
    run = tmp_path / "run"
    run.mkdir()
    damage(run / "config.json")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(60))  # passes the file check; never loaded, the run stops before
    one_line(invoke("eval", dataset, "--methods", "op", "--strong", f"gguf:{model}", "--out", run),
             f"{run / 'config.json'} is damaged")
    one_line(invoke("report", run), f"{run / 'config.json'} is damaged")
    one_line(invoke("scale", "fit", run), f"{run / 'config.json'} is damaged")
    (run / "config.json").write_text("[1, 2]")
    one_line(invoke("report", run), "is a JSON list, not a run configuration")


@pytest.mark.parametrize("rows, match", [
    (b"\x00\x01\x02\xff\xfe binary\n", "rows.jsonl:1 is not UTF-8 text"),
    (b'{"example_id": "q1", "method": "op", "metrics": {}}\n', "rows.jsonl:1: the row has no 'trace'"),
    (b'{"example_id": 3, "method": "op"}\n', "rows.jsonl:1: row field 'example_id' is a int"),
    (b'{"example_id": "q1", "method": "op", "metrics": {"f1": "high"}, "trace": {}}\n',
     "'metrics' must map names to numbers"),
])
def test_report_on_rows_it_cannot_read_names_the_line(tmp_path, rows, match):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "rows.jsonl").write_bytes(rows)
    one_line(invoke("report", run), match)


def test_plan_with_a_directory_for_fit_is_named(tmp_path):
    run = write_run(tmp_path / "run", DRAG_GRID)
    one_line(invoke("plan", "--budget", "4k", "--fit", tmp_path, "--task", run),
             f"{tmp_path} is a directory; pass the fit file in it")


def test_read_only_commands_never_cut_a_live_runs_last_line(tmp_path):
    pytest.importorskip("matplotlib", reason="needs the [eval] extra")
    run = write_run(tmp_path / "run", DRAG_GRID)
    with (run / "rows.jsonl").open("a") as f:
        f.write('{"example_id": "q9", "strat')  # the grid is half-way through writing its next row
    before = (run / "rows.jsonl").read_bytes()
    fit = invoke("scale", "fit", run, "--metric", "f1", "--out", tmp_path / "fit" / "allocation.json")
    assert fit.exit_code == 0, fit.output
    summary = invoke("scale", "summary", run)
    plan = invoke("plan", "--budget", "4k", "--fit", tmp_path / "fit" / "allocation.json", "--task", run)
    assert summary.exit_code == 0 and plan.exit_code == 0, summary.output + plan.output
    assert (run / "rows.jsonl").read_bytes() == before


def test_a_row_whose_choices_are_one_string_is_refused(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"question": "Which?", "answers": ["a"], "choices": "abc", "task": "choice"}) + "\n")
    with pytest.raises(InputError, match=r"d.jsonl:1: 'choices' must be a list of option strings"):
        load_dataset(path)
    one_line(invoke("eval", path, "--out", tmp_path / "run"), "'choices' must be a list of option strings")


@pytest.mark.parametrize("args, option", [
    (["--context-words", "-5", "--corpus", "c.jsonl"], "--context-words"),
    (["--samples", "100000000"], "--samples"),
    (["--workers", "0"], "--workers"),
])
def test_counts_out_of_bounds_are_refused_naming_the_option(tmp_path, dataset, args, option):
    one_line(invoke("eval", dataset, "--out", tmp_path / "run", *args), f"Invalid value for '{option}'", code=2)
    assert not (tmp_path / "run").exists()


def test_ask_choice_task_without_options_names_the_cli_option(tmp_path):
    context = tmp_path / "c.txt"
    context.write_text("Martha Quill was born in Port Ellis. " * 5)
    one_line(invoke("ask", "Where?", "--context", context, "--task", "choice", "--method", "lc",
                    "--strong", "openai:http://127.0.0.1:9/v1#m"),
             "the choice task needs its options (--choice, one per option)")


def test_a_text_without_spaces_says_so_instead_of_suggesting_smaller_chunks():
    class CharTokens(FakeLLM):
        def _count_tokens(self, text):
            return max(1, len(text) // 4)

    op = make_method("op", strong=CharTokens(lambda prompt, i: "x"), budget=200)
    with pytest.raises(InputError, match="no spaces to cut it at") as caught:
        op.run("What is it?", "x" * 20_000)
    assert "--chunk-words" not in str(caught.value)


def test_a_file_in_the_way_of_an_out_folder_is_named_and_debug_shows_the_traceback(tmp_path):
    run = write_run(tmp_path / "run", DRAG_GRID)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder is needed")
    one_line(invoke("scale", "fit", run, "--out", blocker / "fit.json"),
             f"--out {blocker}: a part of this path is a file")
    debug = invoke("--debug", "scale", "fit", run, "--out", blocker / "fit.json")
    assert debug.exit_code == 1 and debug.exception is not None and not isinstance(debug.exception, SystemExit)


@pytest.mark.parametrize("error, match", [
    (OSError(errno.ENOSPC, "No space left on device", "/runs/x/rows.jsonl"),
     "error: /runs/x/rows.jsonl: No space left on device (check the path, its permissions and free disk space)"),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
     "error: a file is not UTF-8 text (bad byte at offset 0); convert it to UTF-8"),
    (json.JSONDecodeError("Expecting value", "x", 0), "error: a file is not valid JSON (Expecting value at line 1"),
    (ZeroDivisionError("division by zero"), "error: unexpected ZeroDivisionError: division by zero; re-run with "
                                            "`ragfunnel --debug ...` for the traceback and report it"),
])
def test_any_unexpected_error_is_one_line(error, match):
    @click.command(cls=Command)
    def broken():
        raise error

    result = CliRunner().invoke(broken, [])
    assert result.exit_code == 1 and result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(match), result.stderr
