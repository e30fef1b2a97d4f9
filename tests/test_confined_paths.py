"""Nothing is read from outside the folder (or root) a reader was given: symlinks out, links back up, loops,
and a dataset's ``context_file`` naming a file elsewhere."""

from __future__ import annotations

import json
import logging
import os

import pytest

from ragfunnel.documents import files_under, read_context, read_document
from ragfunnel.errors import InputError
from ragfunnel.eval.datasets import load_dataset


@pytest.fixture
def planted(tmp_path):
    """A folder holding one real file, a link to a file outside, a link back up to its parent (which
    holds a link to the outside file too) and a link loop."""
    outside = tmp_path / "vault.txt"
    outside.write_text("The vault code is 4711.")
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("The ferry leaves at nine.")
    (folder / "stolen.txt").symlink_to(outside)
    (folder / "sub" / "up").symlink_to("..")
    (folder / "sub" / "inner.md").write_text("# Inner\n\nThe bridge opens at ten.")
    (folder / "loop.txt").symlink_to(folder / "loop.txt")
    (tmp_path / "passwd.txt").write_text("root:x:0:0")
    (folder / "sub" / "far").symlink_to(tmp_path)
    return folder


def test_a_folder_walk_keeps_only_what_resolves_inside_it(planted, caplog):
    with caplog.at_level(logging.WARNING):
        files = files_under(planted)
    assert [p.relative_to(planted).as_posix() for p in files] == ["notes.txt", "sub/inner.md"]
    said = caplog.text
    assert "stolen.txt: it resolves outside" in said
    assert "symlink loop at" in said and "loop.txt" in said
    assert "leads back to a folder already read" in said  # sub/up -> ..


def test_a_fifo_in_a_folder_is_skipped_with_a_warning(planted, caplog):
    os.mkfifo(planted / "pipe.txt")  # named like a document: reading it would wait for a writer
    os.mkfifo(planted / "pipe")  # named like nothing ragfunnel reads: passed over, as any such file is
    with caplog.at_level(logging.WARNING):
        files = files_under(planted)
        located = read_context([planted])
    assert [p.relative_to(planted).as_posix() for p in files] == ["notes.txt", "sub/inner.md"]
    assert "The ferry leaves at nine." in located.text
    said = [r.getMessage() for r in caplog.records if "pipe" in r.getMessage()]
    assert said == [f"skipped {planted / 'pipe.txt'}: it is not a regular file (a FIFO, socket or device)"] * 2


def test_reading_a_folder_never_holds_the_outside_text(planted):
    located = read_context([planted])
    assert "ferry" in located.text and "bridge" in located.text
    assert "4711" not in located.text and "root:x" not in located.text


def test_a_walk_may_follow_links_that_stay_inside_its_root(planted, tmp_path):
    files = files_under(planted / "sub", root=planted)
    assert sorted(p.name for p in files) == ["inner.md", "notes.txt"]  # sub/up -> .. is inside the root


def test_a_symlink_loop_named_directly_is_one_line(planted):
    with pytest.raises(InputError, match=r"^symlink loop at .*loop\.txt; point the link"):
        read_document(planted / "loop.txt")


def _dataset(tmp_path, context_file):
    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    (folder / "memo.txt").write_text("The budget is 40 euros.")
    path = folder / "set.jsonl"
    path.write_text(json.dumps({"question": "What is the budget?", "answer": "40 euros",
                                "context_file": context_file}) + "\n")
    return path


def test_context_file_inside_the_dataset_folder_is_read(tmp_path):
    (example,) = load_dataset(_dataset(tmp_path, "memo.txt")).examples
    assert "40 euros" in example.context


@pytest.mark.parametrize("name", ["/etc/passwd", "../secret.txt"])
def test_context_file_outside_the_dataset_folder_is_refused(tmp_path, name):
    (tmp_path / "secret.txt").write_text("hunter2")
    with pytest.raises(InputError, match="outside the dataset's folder.*--context-files-anywhere"):
        load_dataset(_dataset(tmp_path, name))
    loaded = load_dataset(_dataset(tmp_path, name), on_error="skip")
    assert not loaded.examples and "outside the dataset's folder" in loaded.errors[0].message


def test_context_file_through_a_symlink_out_is_refused(tmp_path):
    (tmp_path / "secret.txt").write_text("hunter2")
    path = _dataset(tmp_path, "link.txt")
    os.symlink(tmp_path / "secret.txt", path.parent / "link.txt")
    with pytest.raises(InputError, match="outside the dataset's folder"):
        load_dataset(path)


def test_context_files_anywhere_when_asked(tmp_path):
    (tmp_path / "secret.txt").write_text("The answer lives elsewhere.")
    (example,) = load_dataset(_dataset(tmp_path, "../secret.txt"), context_files_anywhere=True).examples
    assert "elsewhere" in example.context


def test_mcp_add_document_on_a_folder_never_stores_the_outside_file(planted):
    pytest.importorskip("mcp", reason="needs the [mcp] extra")
    from tests.helpers.mcp_client import error_text, payload, session_run

    async def calls(session):
        folder = await session.call_tool("add_document", {"path": "."})
        sub = await session.call_tool("add_document", {"path": "sub"})
        loop = await session.call_tool("add_document", {"path": "loop.txt"})
        return folder, sub, loop

    folder, sub, loop = session_run(planted, calls)
    assert sorted(f["name"] for f in payload(folder)["files"]) == ["notes.txt", "sub/inner.md"]
    assert sorted(f["name"] for f in payload(sub)["files"]) == ["inner.md", "up/notes.txt"]  # .. is in the root
    assert "add_document: symlink loop at" in error_text(loop) and "loop.txt" in error_text(loop)


def test_ask_and_index_say_a_loop_in_one_line_and_skip_links_out(planted, tmp_path):
    from tests.helpers.cli import assert_one_line_error, run

    assert_one_line_error(run("ask", "Q?", "--context", str(planted / "loop.txt")), "symlink loop at")
    r = run("index", str(planted), "--out", str(tmp_path / "ix"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["documents"] == 2 and "stolen.txt: it resolves outside" in r.stderr
    assert "4711" not in "".join(p.read_text(errors="ignore") for p in (tmp_path / "ix").rglob("*") if p.is_file())


def test_a_context_file_holding_a_nul_byte_is_a_row_error(tmp_path):
    loaded = load_dataset(_dataset(tmp_path, "memo\x00.txt"), on_error="skip")
    assert not loaded.examples and "holds a NUL byte" in loaded.errors[0].message
