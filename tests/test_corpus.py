"""Corpus reading, the relation graph and FunnelRAG's clustering (Algorithm 1), no model."""

import json

import pytest

from ragfunnel.corpus import load_corpus
from ragfunnel.corpus.clustering import approx_tokens, closeness, cluster_documents
from ragfunnel.corpus.graph import relation_graph
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_manifest import IndexConfig
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.types import Document
from tests.helpers.corpora import WIKI

nx = pytest.importorskip("networkx", reason="needs the [corpus] extra")


def two_triangles_and_a_bridge():
    g = nx.Graph([(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5), (2, 3)])
    return g


def test_algorithm_1_finds_the_two_triangles():
    # Coefficients: 0, 1, 4, 5 -> 1.0; 2, 3 -> 1/3. Node 0 absorbs {1} and {2}; node 4 absorbs {3}, {5};
    # the bridge 2-3 cannot join them under a cap of 3.
    assert cluster_documents(two_triangles_and_a_bridge(), [1] * 6, max_size=3) == [[0, 1, 2], [4, 3, 5]]
    merged = cluster_documents(two_triangles_and_a_bridge(), [1] * 6, max_size=6)
    assert [sorted(c) for c in merged] == [[0, 1, 2, 3, 4, 5]]


def test_a_document_larger_than_the_cap_stays_alone():
    path = nx.Graph([(0, 1), (1, 2)])
    assert cluster_documents(path, [10, 1, 1], max_size=5) == [[0], [1, 2]]


def test_isolated_documents_are_their_own_clusters():
    g = nx.Graph()
    g.add_nodes_from(range(3))
    assert cluster_documents(g, [1, 1, 1], max_size=10) == [[0], [1], [2]]


def test_closeness_hand_computed():
    distances = {0: 0, 1: 1, 2: 2}  # from document 0
    assert closeness(distances, [1, 2]) == pytest.approx((1 + 0.5) / 2)
    assert closeness(distances, [1, 9]) == pytest.approx(0.5)  # 9 is out of reach


def test_approx_tokens_counts_words_and_punctuation():
    assert approx_tokens(Document("1", "Gull Rock", "It's 1871.")) == 2 + 5  # It ' s 1871 .


def test_graph_from_links_and_from_title_mentions():
    linked = [Document("a", "Alpha", "x", ("Beta", "Nowhere")), Document("b", "Beta", "y"),
              Document("c", "Gamma", "z", ("Alpha",))]
    assert sorted(relation_graph(linked).edges) == [(0, 1), (0, 2)]
    mentioned = [Document("a", "Gull Rock", "The keeper of Gull Rock wrote."),
                 Document("b", "Martha Quill", "She lived near Gull Rock lighthouse."),
                 Document("c", "The", "The the the. Martha"),  # only common words: never a mention
                 Document("d", "Port Ellis", "A harbour town; Martha Quill sailed from here.")]
    assert sorted(relation_graph(mentioned).edges) == [(0, 1), (1, 3)]


def test_jsonl_corpus_with_links_and_bad_rows(tmp_path):
    good = tmp_path / "c.jsonl"
    good.write_text(json.dumps({"id": "1", "title": "A", "text": "t", "links": ["B"]}) + "\n\n"
                    + json.dumps({"title": "B", "text": "u"}) + "\n")
    docs = load_corpus(good)
    assert docs[0].links == ("B",) and docs[1].id == "B#3"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"title": "A", "text": "t", "links": "B"}) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: 'links' must be a list"):
        load_corpus(bad)
    with pytest.raises(InputError, match="does not exist"):
        load_corpus(tmp_path / "none.jsonl")


def test_a_broken_xml_dump_is_named(tmp_path):
    path = tmp_path / "dump.xml"
    path.write_text("<mediawiki><page><title>A</title>")
    with pytest.raises(InputError, match="not a readable MediaWiki XML export"):
        load_corpus(path)


def test_the_real_wikipedia_excerpt():
    if not WIKI.exists():
        pytest.skip(f"{WIKI} not present")
    docs = load_corpus(WIKI)
    assert len(docs) == 106  # articles; the 100 redirects become link targets, not documents
    anarchism = next(d for d in docs if d.title == "Anarchism")
    assert "[[" not in anarchism.text and "political philosophy" in anarchism.text
    assert "Political philosophy" in anarchism.links
    graph = relation_graph(docs)
    assert graph.number_of_edges() > 50  # the in-set links, redirects resolved
    clusters = cluster_documents(graph, [approx_tokens(d) for d in docs], max_size=40_000)
    assert sorted(i for c in clusters for i in c) == list(range(len(docs)))
    assert any(len(c) > 1 for c in clusters)


def small_corpus():
    return [Document("a", "Gull Rock", "The lighthouse on Gull Rock was built of granite.", ("Martha Quill",)),
            Document("b", "Martha Quill", "Martha Quill kept the Gull Rock light for thirty years.",
                     ("Gull Rock", "Port Ellis")),  # Port Ellis is not in the corpus
            Document("c", "Seabirds", "Puffins and gannets nest on the cliffs every spring.")]


def test_index_round_trip_and_cluster_search(tmp_path):
    m = build_index(small_corpus(), tmp_path / "ix", source="test")
    assert (m.documents, m.clusters, m.graph, m.edges, m.links_outside) == (3, 2, "links", 1, 1)
    ix = CorpusIndex(tmp_path / "ix")
    assert ix.document(1) == small_corpus()[1]
    best, _ = ix.cluster_bm25.top_k("Who kept the light?", 1)
    assert sorted(ix.cluster(int(best[0]))) == [0, 1]
    assert not (tmp_path / "ix.partial").exists()


def test_index_is_kept_when_up_to_date_and_refused_otherwise(tmp_path):
    first = build_index(small_corpus(), tmp_path / "ix", source="test")
    assert build_index(small_corpus(), tmp_path / "ix", source="test") == first
    with pytest.raises(ConfigError, match="set force to rebuild"):
        build_index(small_corpus()[:2], tmp_path / "ix", source="test")
    assert build_index(small_corpus()[:2], tmp_path / "ix", source="test", force=True).documents == 2
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty and holds no index"):
        build_index(small_corpus(), tmp_path / "other", source="test")


@pytest.mark.parametrize("docs, match", [
    ([Document("a", "A", "x"), Document("a", "B", "y")], "document 2 repeats the id 'a'"),
    ([Document("a", "A", "x"), Document("b", "B", "  ")], r"document 2 \('b'\) has empty text"),
    ([], "holds no documents"),
])
def test_index_refuses_bad_corpora(tmp_path, docs, match):
    with pytest.raises(InputError, match=match):
        build_index(docs, tmp_path / "ix", source="test")
    assert not (tmp_path / "ix").exists()


def test_a_document_larger_than_the_cap_is_counted(tmp_path):
    docs = small_corpus() + [Document("d", "Log", "word " * 50)]
    m = build_index(docs, tmp_path / "ix", IndexConfig(max_cluster_tokens=30), source="test")
    assert m.oversize_documents == 1
    ix = CorpusIndex(tmp_path / "ix")
    assert [3] in [ix.cluster(c) for c in range(ix.n_clusters)]


def test_corrupted_or_foreign_index_is_named(tmp_path):
    build_index(small_corpus(), tmp_path / "ix", source="test")
    with (tmp_path / "ix" / "documents.jsonl").open("r+b") as f:
        f.write(b"X")
    with pytest.raises(InputError, match="documents.jsonl is corrupted"):
        CorpusIndex(tmp_path / "ix")
    build_index(small_corpus(), tmp_path / "ix", source="test", force=True)
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    (tmp_path / "ix" / "manifest.json").write_text(json.dumps({**manifest, "version": 0}))
    with pytest.raises(InputError, match="rebuild it with"):
        CorpusIndex(tmp_path / "ix")
    with pytest.raises(InputError, match="not a ragfunnel index"):
        CorpusIndex(tmp_path)


def test_an_index_from_before_the_document_vectors_flag_was_dropped_still_opens(tmp_path):
    # Earlier v2 manifests carried "document_vectors": bool; it is now read from the file list.
    build_index(small_corpus(), tmp_path / "ix", source="test")
    path = tmp_path / "ix" / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "document_vectors": False}))
    ix = CorpusIndex(tmp_path / "ix")
    assert ix.document_vectors is None and not ix.manifest.document_vectors
    assert build_index(small_corpus(), tmp_path / "ix", source="test").documents == len(small_corpus())  # up to date
    path.write_text(json.dumps({**json.loads(path.read_text()), "unknown": 1}))
    with pytest.raises(InputError, match="unexpected fields"):
        CorpusIndex(tmp_path / "ix")
