"""One writer per index: a second build or update is refused in one line naming the holder's PID; two updates
started together leave an index that opens and equals a fresh build of the corpus written last; a symlinked
index folder keeps its link; what a killed writer left is cleaned up, and what ragfunnel did not make is refused,
never followed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_manifest import MANIFEST
from ragfunnel.corpus.index_update import update_index
from ragfunnel.errors import ConfigError, RunBusy
from ragfunnel.journal import exclusive
from ragfunnel.types import Document


def corpus(n: int, tag: str) -> list[Document]:
    return [Document(f"{tag}{i}", f"{tag.title()} place {i}",
                     f"The {tag} harbour number {i} has a granite pier and a lantern lit at dusk by keeper {i}.")
            for i in range(n)]


def files_of(root) -> dict:
    return json.loads((root / MANIFEST).read_text())["files"]


def test_a_second_writer_is_refused_in_one_line_naming_the_holder(tmp_path):
    out = tmp_path / "ix"
    build_index(corpus(5, "a"), out, source="a")
    with exclusive(tmp_path / "ix.lock", out):  # as a writer in another process holds it
        for write in (lambda: build_index(corpus(6, "b"), out, source="b", force=True),
                      lambda: update_index(corpus(6, "b"), out, source="b")):
            with pytest.raises(RunBusy) as busy:
                write()
            assert f"PID {os.getpid()}" in str(busy.value) and "\n" not in str(busy.value)
    assert CorpusIndex(out).manifest.source == "a"


UPDATE = textwrap.dedent("""
    import json, sys
    from ragfunnel.corpus.index_update import update_index
    from ragfunnel.errors import RunBusy
    from ragfunnel.types import Document
    docs = [Document(**row) for row in json.loads(open(sys.argv[2]).read())]
    try:
        update_index(docs, sys.argv[1], source=sys.argv[2])
    except RunBusy as e:
        print(e)
        sys.exit(3)
""")


def test_two_updates_at_once_leave_a_fresh_build_of_the_corpus_written_last(tmp_path):
    corpora = {}
    for tag, n in (("a", 300), ("b", 250)):
        corpora[tag] = corpus(n, tag)
        (tmp_path / f"{tag}.json").write_text(json.dumps([{"id": d.id, "title": d.title, "text": d.text}
                                                          for d in corpora[tag]]))
        build_index(corpora[tag], tmp_path / f"fresh-{tag}", source=str(tmp_path / f"{tag}.json"))
    out = tmp_path / "ix"
    build_index(corpus(20, "c"), out, source="c")
    for _ in range(10):
        runs = [subprocess.Popen([sys.executable, "-c", UPDATE, str(out), str(tmp_path / f"{tag}.json")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for tag in "ab"]
        outcomes = [(run.wait(timeout=120), *run.communicate()) for run in runs]
        for code, stdout, stderr in outcomes:
            assert code in (0, 3), stderr
            if code == 3:  # the other held the lock
                assert "being written by another ragfunnel process (PID " in stdout and stdout.count("\n") == 1
        assert any(code == 0 for code, _, _ in outcomes)
        index = CorpusIndex(out)  # opens, every file checked
        last = "a" if index.manifest.source.endswith("a.json") else "b"
        assert files_of(out) == files_of(tmp_path / f"fresh-{last}")
        assert index.manifest.content_sha256 == CorpusIndex(tmp_path / f"fresh-{last}").manifest.content_sha256
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ix")) == ["ix", "ix.lock"]


def test_a_symlinked_index_folder_keeps_its_link_and_its_target_is_swapped(tmp_path):
    real = tmp_path / "real"
    link = tmp_path / "ix"
    link.symlink_to(real)
    build_index(corpus(5, "a"), link, source="a")
    update_index(corpus(7, "b"), link, source="b")
    update_index(corpus(9, "c"), link, source="c")
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert CorpusIndex(link).manifest.source == "c" and len(CorpusIndex(link)) == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix", "real", "real.lock"]


def test_leftovers_of_a_killed_writer_are_cleaned_up(tmp_path):
    out = tmp_path / "ix"
    build_index(corpus(5, "a"), out, source="a")
    partial = tmp_path / "ix.partial"  # killed while writing its build
    partial.mkdir()
    (partial / ".ragfunnel-partial").write_bytes(b"")
    (partial / "documents.jsonl").write_text("half")
    deleting = tmp_path / "ix.previous.deleting"  # killed while deleting the index it replaced
    deleting.mkdir()
    (deleting / MANIFEST).write_text("{}")
    update_index(corpus(6, "b"), out, source="b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix", "ix.lock"]
    out.rename(tmp_path / "ix.previous")  # killed between the two renames of a swap
    update_index(corpus(6, "b"), out, source="b")
    assert CorpusIndex(out).manifest.source == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix", "ix.lock"]


@pytest.mark.parametrize("name", ["ix.previous", "ix.previous.deleting", "ix.partial"])
@pytest.mark.parametrize("planted", ["link", "file", "folder"])
def test_a_sibling_ragfunnel_did_not_make_is_refused_and_left_alone(tmp_path, name, planted):
    out = tmp_path / "ix"
    build_index(corpus(5, "a"), out, source="a")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    sibling = tmp_path / name
    if planted == "link":
        sibling.symlink_to(precious)
    elif planted == "file":
        sibling.write_text("not ours")
    else:
        sibling.mkdir()
        (sibling / "thesis.tex").write_text("not ours either")
    with pytest.raises(ConfigError, match="did not make") as refused:
        update_index(corpus(6, "b"), out, source="b")
    assert str(sibling) in str(refused.value) and "\n" not in str(refused.value)
    assert (precious / "thesis.tex").read_text() == "years of work"
    assert sibling.is_symlink() if planted == "link" else sibling.exists()
    assert CorpusIndex(out).manifest.source == "a"


def test_a_planted_link_as_the_lock_file_is_refused_not_written_through(tmp_path):
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    (tmp_path / "ix.lock").symlink_to(target)
    with pytest.raises(ConfigError, match="is a link"):
        build_index(corpus(5, "a"), tmp_path / "ix", source="a")
    assert target.read_text() == "keep me"
