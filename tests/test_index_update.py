"""`ragfunnel index --update`: an updated index equals a fresh build of the same corpus, file for file; only new
and changed documents are tokenised and embedded; wrong options and old indexes are one line naming --force; a
kill at any moment of an update leaves the old index usable."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

import ragfunnel.corpus.index_build as index_build
import ragfunnel.corpus.index_update as index_update
from ragfunnel.cli.main import main
from ragfunnel.corpus import load_corpus
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_manifest import MANIFEST, IndexConfig
from ragfunnel.corpus.index_update import update_index
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.retrieve.bm25 import concatenate_tokens, tokenize_ids
from ragfunnel.types import Document
from tests.conftest import SHARED

WORDS = ("harbour lighthouse granite keeper gannet puffin cliff storm lantern ferry tide beacon quarry chapel "
         "orchard mill bridge river meadow falcon heron salmon barley copper tin wool loom forge anvil").split()


def corpus(n: int, seed: int = 0) -> list[Document]:
    """``n`` linked documents with titles, 40-70-word texts from a small vocabulary, and links to near ones."""
    rng = np.random.default_rng(seed)
    titles = [f"Place {i} {WORDS[i % len(WORDS)].title()}" for i in range(n)]
    docs = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(40, 71)))).capitalize() + "."
        links = tuple(titles[j] for j in {(i + int(s)) % n for s in rng.integers(1, 6, size=3)} if j != i)
        docs.append(Document(f"d{i}", titles[i], text, links))
    return docs


def changed(docs: list[Document]) -> list[Document]:
    """``docs`` with two texts edited, one link changed, two documents removed and two added, one in the middle."""
    new = list(docs)
    new[3] = replace(new[3], text=new[3].text + " A storm took the lantern.")
    new[10] = replace(new[10], text="Rewritten: " + new[10].text)
    new[12] = replace(new[12], links=(docs[-1].title,))
    del new[20:22]
    new.insert(7, Document("n1", "New Quarry", "The new quarry cut granite for the harbour wall.", (docs[0].title,)))
    new.append(Document("n2", "Late Heron", "A heron fished the river below the mill."))
    return new


def differing_files(a, b) -> list[str]:
    """Files whose size or SHA-256 differ between two index directories' manifests."""
    fa, fb = (json.loads((d / MANIFEST).read_text())["files"] for d in (a, b))
    return sorted(name for name in set(fa) | set(fb) if fa.get(name) != fb.get(name))


def test_tokens_renumbered_by_first_sight_are_what_tokenising_afresh_gives():
    texts = [d.render() for d in corpus(30)] + ["the and of", "書 税 中文"]
    whole = tokenize_ids(texts)
    parts = concatenate_tokens([tokenize_ids(texts[10:]), tokenize_ids(texts[:10])])
    again = parts.take(np.r_[len(texts) - 10:len(texts), 0:len(texts) - 10]).in_first_seen_order()
    assert again.vocab == whole.vocab
    assert np.array_equal(again.ids, whole.ids) and np.array_equal(again.lengths, whole.lengths)


def test_an_updated_index_is_a_fresh_build_file_for_file(tmp_path):
    docs = corpus(60)
    build_index(docs, tmp_path / "ix", IndexConfig(max_cluster_tokens=300), source="v1")
    new = changed(docs)
    done = update_index(new, tmp_path / "ix", IndexConfig(max_cluster_tokens=300), source="v2")
    assert (done.added, done.changed, done.removed, done.kept) == (2, 2, 2, 56)  # a new link is not a new text
    build_index(new, tmp_path / "fresh", IndexConfig(max_cluster_tokens=300), source="v2")
    assert differing_files(tmp_path / "ix", tmp_path / "fresh") == []
    index = CorpusIndex(tmp_path / "ix")
    assert [index.document(i) for i in range(len(index))] == [replace(d, position=i) for i, d in enumerate(new)]
    assert not (tmp_path / "ix.partial").exists() and not (tmp_path / "ix.previous").exists()


def test_an_update_with_nothing_changed_writes_nothing(tmp_path):
    first = build_index(corpus(20), tmp_path / "ix", source="v1")
    before = (tmp_path / "ix" / MANIFEST).stat().st_mtime_ns
    done = update_index(corpus(20), tmp_path / "ix", source="v1")
    assert done.manifest == first and done.describe() == "up to date"
    assert (tmp_path / "ix" / MANIFEST).stat().st_mtime_ns == before


def test_documents_renumbered_by_a_removal_above_them_are_kept(tmp_path):
    """A JSONL corpus without ids numbers its rows (``title#3``): removing row 1 renumbers every later one."""
    docs = corpus(12)
    write_jsonl(docs, tmp_path / "c.jsonl", ids=False)
    build_index(load_corpus(tmp_path / "c.jsonl"), tmp_path / "ix", source="v1")
    write_jsonl(docs[1:], tmp_path / "c.jsonl", ids=False)
    new = load_corpus(tmp_path / "c.jsonl")
    assert new[0].id != docs[1].title + "#2"
    done = update_index(new, tmp_path / "ix", source="v2")
    assert (done.added, done.changed, done.removed, done.kept) == (0, 0, 1, 11)
    build_index(new, tmp_path / "fresh", source="v2")
    assert differing_files(tmp_path / "ix", tmp_path / "fresh") == []


def test_an_update_of_a_missing_index_builds_it(tmp_path):
    done = update_index(corpus(10), tmp_path / "ix", source="v1")
    assert (done.added, done.kept) == (10, 0) and CorpusIndex(tmp_path / "ix").manifest.documents == 10


@pytest.mark.model
def test_only_new_and_changed_passages_are_embedded_and_vectors_equal_a_fresh_build(tmp_path, monkeypatch):
    """The real MiniLM embeds; a wrapper counts what it is given."""
    docs = corpus(40, seed=3)
    config = IndexConfig(flat=True, passage_words=30, embed_documents=True, faiss="none")
    build_index(docs, tmp_path / "ix", config, source="v1")
    embedded: list[str] = []
    real = index_build._embed

    def counting(texts, desc, **kw):
        embedded.extend(texts)
        return real(texts, desc, **kw)

    monkeypatch.setattr(index_build, "_embed", counting)
    new = changed(docs)
    update_index(new, tmp_path / "ix", config, source="v2")
    redone = {d.id for d in new} - {d.id for d in docs} | {docs[3].id, docs[10].id}
    assert sorted(embedded) == sorted(
        [index_build.passage_text(d, s, e) for d in new if d.id in redone
         for s, e in index_build.word_windows(d.text, 30)] + [d.render() for d in new if d.id in redone])
    monkeypatch.setattr(index_build, "_embed", real)
    build_index(new, tmp_path / "fresh", config, source="v2")
    for name in ("flat.vectors.npy", "documents.vectors.npy"):
        a, b = (np.load(tmp_path / d / name) for d in ("ix", "fresh"))
        assert a.shape == b.shape and np.abs(a - b).max() < 1e-5
    assert set(differing_files(tmp_path / "ix", tmp_path / "fresh")) <= {"flat.vectors.npy", "documents.vectors.npy"}
    ix, fresh = CorpusIndex(tmp_path / "ix"), CorpusIndex(tmp_path / "fresh")
    for question in ("granite quarry harbour", "heron river mill", "storm lantern"):
        found = [index.flat_search(question, 5, exact=True)[0].tolist() for index in (ix, fresh)]
        assert found[0] == found[1]


def text_vectors(texts, desc, **_):
    """Vectors that depend on each text alone (a stand-in for MiniLM where only the plumbing is tested)."""
    seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little") for t in texts]
    rows = np.stack([np.random.default_rng(seed).standard_normal(16) for seed in seeds]).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.mark.parametrize("config", [IndexConfig(flat=True, passage_words=25, faiss="flat"),
                                    IndexConfig(flat=True, passage_words=25, embed_documents=True, faiss="none"),
                                    IndexConfig(embed_documents=True)],
                         ids=["flat+faiss", "flat+documents", "documents"])
def test_stored_vectors_are_placed_as_a_fresh_build_places_them(tmp_path, monkeypatch, config):
    monkeypatch.setattr(index_build, "_embed", text_vectors)
    monkeypatch.setattr("ragfunnel.retrieve.embed.MiniLMEmbedder.dim", 16)
    docs = corpus(50, seed=4)
    build_index(docs, tmp_path / "ix", config, source="v1")
    new = changed(docs)
    update_index(new, tmp_path / "ix", config, source="v2")
    build_index(new, tmp_path / "fresh", config, source="v2")
    assert differing_files(tmp_path / "ix", tmp_path / "fresh") == []


def test_duplicates_links_and_order_are_counted_as_they_are(tmp_path):
    docs = corpus(10)
    twins = [*docs, replace(docs[0], id="twin")]  # the same title and text under two ids
    build_index(twins, tmp_path / "ix", source="v1")
    done = update_index([*twins, Document("n", "New", "A new text.")], tmp_path / "ix", source="v2")
    assert (done.added, done.changed, done.removed, done.kept) == (1, 0, 0, 11)
    relinked = [replace(d, links=()) for d in reversed(twins)] + [Document("n", "New", "A new text.")]
    done = update_index(relinked, tmp_path / "ix", source="v3")
    assert done.describe().startswith("no text changed; links, ids or order updated in ")
    build_index(relinked, tmp_path / "fresh", source="v3")
    assert differing_files(tmp_path / "ix", tmp_path / "fresh") == []


def test_terms_from_another_tokeniser_are_not_mixed(tmp_path, monkeypatch):
    build_index(corpus(10), tmp_path / "ix", source="v1")
    monkeypatch.setattr(index_update, "tokeniser_identity", lambda: "bm25s 9, PyStemmer 9, jieba absent")
    with pytest.raises(ConfigError, match=r"terms were made by bm25s .*, and this ragfunnel tokenises with bm25s 9, "
                                          r"PyStemmer 9, jieba absent; they would not mix: rebuild it once with force"):
        update_index(corpus(11), tmp_path / "ix", source="v2")


def test_other_options_or_an_older_index_are_one_line_naming_force(tmp_path):
    build_index(corpus(20), tmp_path / "ix", IndexConfig(max_cluster_tokens=500), source="v1")
    with pytest.raises(ConfigError, match=r"built with other options \(max_cluster_tokens 500\); pass the same "
                                          r"ones to update it, or rebuild it with these "
                                          r"\(with force instead of update\)"):
        update_index(corpus(21), tmp_path / "ix", source="v2")
    write_jsonl(corpus(21), tmp_path / "c.jsonl")
    result = CliRunner().invoke(main, ["index", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "ix"), "--update"])
    assert "built with other options (--max-cluster-tokens 500); pass the same ones to update it, or rebuild it " \
           "with these (with --force instead of --update)" in result.output
    manifest = json.loads((tmp_path / "ix" / MANIFEST).read_text())
    (tmp_path / "ix" / "documents.sha256.npy").unlink()
    del manifest["files"]["documents.sha256.npy"]
    from ragfunnel.corpus.index_manifest import Manifest
    (tmp_path / "ix" / MANIFEST).write_text(json.dumps(Manifest.from_json(manifest).to_json()))
    with pytest.raises(ConfigError, match="built by an earlier ragfunnel.*rebuild it once with force"):
        update_index(corpus(21), tmp_path / "ix", IndexConfig(max_cluster_tokens=500), source="v2")
    manifest["version"] = 1  # an index another ragfunnel wrote
    (tmp_path / "ix" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"v1; this ragfunnel reads .* v2: rebuild it with `ragfunnel index CORPUS "
                                         r"--out .*ix --force`$"):
        update_index(corpus(21), tmp_path / "ix", IndexConfig(max_cluster_tokens=500), source="v2")
    result = CliRunner().invoke(main, ["index", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "ix"),
                                       "--update", "--force"])
    assert result.exit_code != 0 and "give one of them" in result.output


def write_jsonl(docs: list[Document], path, *, ids: bool = True) -> None:
    path.write_text("".join(json.dumps({**({"id": d.id} if ids else {}), "title": d.title, "text": d.text,
                                        "links": list(d.links)}) + "\n" for d in docs))


def test_the_cli_updates_and_says_what_changed(tmp_path):
    docs = corpus(30)
    write_jsonl(docs, tmp_path / "c.jsonl")
    runner = CliRunner()
    assert runner.invoke(main, ["index", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "ix")]).exit_code == 0
    write_jsonl(changed(docs), tmp_path / "c.jsonl")
    result = runner.invoke(main, ["index", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "ix"), "--update"])
    assert result.exit_code == 0, result.output
    assert "updated: 2 added, 2 changed, 2 removed, 26 kept" in result.output
    assert CorpusIndex(tmp_path / "ix").manifest.documents == 30


def test_a_kill_during_an_update_leaves_the_old_index_usable(tmp_path):
    """Killed at several moments while it writes DIR.partial, the update leaves DIR as it was, and the next one
    finishes; a kill between the swap's two renames is undone by the next run."""
    docs = corpus(20000, seed=1)
    write_jsonl(docs, tmp_path / "c.jsonl")
    build_index(docs, tmp_path / "ix", source="v1")
    expected = CorpusIndex(tmp_path / "ix").manifest
    new = changed(docs)
    write_jsonl(new, tmp_path / "c.jsonl")
    command = [sys.executable, "-m", "ragfunnel", "index", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "ix"),
               "--update"]
    for wait_for in ("documents.jsonl", "documents.tokens/terms.json", "clusters.bm25/params.index.json"):
        shutil.rmtree(tmp_path / "ix.partial", ignore_errors=True)  # the last kill's, so its files are not waited on
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not (tmp_path / "ix.partial" / wait_for).exists() and process.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.002)
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL, f"the update finished before {wait_for} was written"
        assert CorpusIndex(tmp_path / "ix").manifest == expected  # every file checked
    (tmp_path / "ix").rename(tmp_path / "ix.previous")  # as a kill between the two renames leaves it
    assert CorpusIndex(tmp_path / "ix").manifest == expected  # a reader puts it back
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    build_index(new, tmp_path / "fresh", source="v2")
    assert differing_files(tmp_path / "ix", tmp_path / "fresh") == []


@pytest.mark.skipif(not (SHARED / "hotpotqa_train_hipporag").exists(), reason="needs ../shared/data")
def test_the_hotpotqa_corpus_updated_equals_its_fresh_build(tmp_path):
    docs = load_corpus(SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train_corpus.json")
    build_index(docs[:900], tmp_path / "ix", source="first 900")
    update_index(docs[50:], tmp_path / "ix", source="all but the first 50")
    build_index(docs[50:], tmp_path / "fresh", source="all but the first 50")
    assert differing_files(tmp_path / "ix", tmp_path / "fresh") == []
