"""BM25 over single documents in the corpus index (DRAG/IterDRAG retrieval), no model."""

import json

import pytest

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_manifest import VERSION
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.retrieve.bm25 import BM25Index
from ragfunnel.types import Document


def corpus():
    return [Document("a", "Gull Rock", "The lighthouse on Gull Rock was built of granite."),
            Document("b", "Martha Quill", "Martha Quill kept the Gull Rock light for thirty years."),
            Document("c", "Seabirds", "Puffins and gannets nest on the cliffs every spring."),
            Document("d", "Port Ellis", "Port Ellis is the harbour town where Martha Quill was born.")]


@pytest.fixture
def index(tmp_path):
    build_index(corpus(), tmp_path / "ix", source="test")
    return CorpusIndex(tmp_path / "ix")


def test_search_documents_best_first_with_bm25_scores(index):
    hits = index.search_documents("Who kept the Gull Rock light?", 2)
    assert [d.id for d, _ in hits] == ["b", "a"]
    assert hits[0][0] == corpus()[1]
    # the same scores as a BM25 index over the documents' rendered text
    reference = BM25Index([d.render() for d in corpus()]).score(["Who kept the Gull Rock light?"])[0]
    assert [s for _, s in hits] == pytest.approx([reference[1], reference[0]])
    assert hits[0][1] > hits[1][1] > 0


def test_titles_are_searched_too(index):
    assert [d.id for d, _ in index.search_documents("seabirds", 3)] == ["c"]


def test_k_zero_unmatched_and_bad_queries(index):
    assert index.search_documents("Who kept the light?", 0) == []
    assert index.search_documents("zeppelin quasar", 3) == []  # no shared term: nothing was retrieved
    assert len(index.search_documents("Martha Quill Gull Rock Puffins", 10)) == 4  # k beyond the corpus
    with pytest.raises(ConfigError, match="must be >= 0, got -1"):
        index.search_documents("Who kept the light?", -1)
    with pytest.raises(InputError, match="query is empty"):
        index.search_documents("  ", 2)


def test_document_bm25_is_in_the_manifest_and_checked(tmp_path):
    m = build_index(corpus(), tmp_path / "ix", source="test")
    assert m.version == VERSION == 2
    listed = [name for name in m.files if name.startswith("documents.bm25/")]
    assert listed and all((tmp_path / "ix" / name).is_file() for name in listed)
    target = tmp_path / "ix" / listed[0]
    target.write_bytes(target.read_bytes() + b" ")
    with pytest.raises(InputError, match=f"{listed[0]} is corrupted"):
        CorpusIndex(tmp_path / "ix")


def test_a_version_1_index_is_refused_with_the_rebuild_command(tmp_path):
    build_index(corpus(), tmp_path / "ix", source="test")
    manifest = tmp_path / "ix" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "version": 1}))
    with pytest.raises(InputError, match=r"v1; this ragfunnel reads ragfunnel-corpus-index v2: rebuild it with "
                                         r"`ragfunnel index CORPUS --out .* --force`"):
        CorpusIndex(tmp_path / "ix")
    # and build_index does not mistake it for an up-to-date index
    with pytest.raises(ConfigError, match="set force"):
        build_index(corpus(), tmp_path / "ix", source="test")
