"""`ragfunnel index --flat --ray`: passages and documents embedded by Ray Data actors on a local cluster
(``ray.init(num_cpus=2)``), shards merged into the index a one-process build writes.

The bundled MiniLM on 300 real FlashRAG passages shows the sharded build equals the one-process one
(``model``); the fake server's letter-count embedder shows the same with no model to load, and that a
worker's failure reaches the user as one line.
"""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from ragfunnel.cli.main import main
from ragfunnel.corpus import load_corpus, ray_embedding
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_manifest import IndexConfig
from ragfunnel.errors import BackendUnavailable
from ragfunnel.ray_cluster import RayOptions
from tests.conftest import SHARED
from tests.helpers.embedders import DOCS, one_line
from tests.helpers.network import free_port

pytest.importorskip("networkx", reason="needs the [corpus] extra")

FLASHRAG = SHARED / "flashrag_toy" / "wiki_sample_corpus.jsonl"
VECTORS = ("flat.vectors.npy", "documents.vectors.npy")


@pytest.fixture
def shard_counts(monkeypatch) -> list[int]:
    """Small input blocks (so several actors share even a tiny corpus); how many shards each merge found."""
    monkeypatch.setattr(ray_embedding, "BLOCK_ROWS", 64)
    monkeypatch.setattr(ray_embedding, "BATCH_ROWS", 64)
    counts = []
    merge = ray_embedding.merge_shards

    def counting(shards, path, **kw):
        counts.append(len(list(shards.glob("part-*.rows.npy"))))
        return merge(shards, path, **kw)

    monkeypatch.setattr(ray_embedding, "merge_shards", counting)
    return counts


def assert_same_index(one, two) -> None:
    """Two builds of one corpus hold the same files and manifest but for timings and float rounding."""
    a, b = (json.loads((root / "manifest.json").read_text()) for root in (one, two))
    mutable = ("build_seconds", "files", "manifest_sha256")
    assert {k: v for k, v in a.items() if k not in mutable} == {k: v for k, v in b.items() if k not in mutable}
    assert a["files"].keys() == b["files"].keys()
    for name in a["files"]:
        if name in VECTORS:
            assert a["files"][name]["bytes"] == b["files"][name]["bytes"]
            assert np.allclose(np.load(one / name), np.load(two / name), atol=1e-5), name
        else:
            assert a["files"][name] == b["files"][name], name  # spans, documents, clusters, BM25: byte for byte
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())  # no shard left behind


@pytest.mark.model
def test_a_sharded_ray_build_equals_a_one_process_build(ray_cluster, shard_counts, tmp_path):
    if not FLASHRAG.exists():
        pytest.skip(f"{FLASHRAG} not present")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(FLASHRAG.read_text().splitlines(keepends=True)[:300]))
    docs = load_corpus(corpus)
    config = IndexConfig(flat=True, embed_documents=True)
    build_index(docs, tmp_path / "one", config, source="flashrag")
    built = build_index(docs, tmp_path / "ray", config, source="flashrag", ray=RayOptions(actors=2))
    assert built.passages >= 300 and shard_counts == [-(-built.passages // 64), -(-300 // 64)]
    assert_same_index(tmp_path / "one", tmp_path / "ray")
    one, two = CorpusIndex(tmp_path / "one"), CorpusIndex(tmp_path / "ray")
    for question in [docs[0].title, "Who founded the company?", "a river in Europe", docs[299].text[:80]]:
        (a, sa), (b, sb) = one.flat_search(question, 10, exact=True), two.flat_search(question, 10, exact=True)
        assert list(a) == list(b) and np.allclose(sa, sb, atol=1e-5), question


def test_a_ray_build_with_a_server_embedder_equals_a_one_process_build(ray_cluster, shard_counts, embedding_server,
                                                                       tmp_path, monkeypatch):
    url, _ = embedding_server
    monkeypatch.setattr(ray_embedding, "BLOCK_ROWS", 3)  # shards of 3 passages or documents
    monkeypatch.setattr(ray_embedding, "BATCH_ROWS", 3)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in DOCS))
    build_index(load_corpus(corpus), tmp_path / "one",
                IndexConfig(flat=True, passage_words=5, embed_documents=True, embedder=f"openai:{url}#m"),
                source=str(corpus.resolve()))
    result = CliRunner().invoke(main, ["index", str(corpus), "--out", str(tmp_path / "ray"), "--flat",
                                       "--passage-words", "5", "--embed-documents", "--embedder", f"openai:{url}#m",
                                       "--json", "--ray-actors", "2", "--ray"])
    assert result.exit_code == 0, result.stderr
    built = json.loads(result.stdout)
    assert built["embedder"]["spec"] == f"openai:{url}#m" and shard_counts == [-(-built["passages"] // 3), 2]
    assert_same_index(tmp_path / "one", tmp_path / "ray")


def test_a_worker_that_cannot_reach_the_embedder_fails_the_build_in_one_line(ray_cluster, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(BackendUnavailable) as e:
        build_index(DOCS, tmp_path / "ix", IndexConfig(flat=True, embedder=f"openai:{url}#m"), source="test",
                    ray=RayOptions(actors=1))
    assert one_line(e).startswith(f"cannot reach {url}/embeddings: connection refused")
    assert not (tmp_path / "ix").exists()


def test_ray_needs_something_to_embed(tmp_path):
    pytest.importorskip("ray", reason="needs the [ray] extra")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in DOCS))
    result = CliRunner().invoke(main, ["index", str(corpus), "--out", str(tmp_path / "ix"), "--ray", "local"])
    assert result.exit_code == 1
    assert result.stderr == "error: --ray embeds flat passages and documents; set --flat (or --embed-documents) too\n"


def test_merging_refuses_a_row_missing_or_written_twice(tmp_path):
    def shards(*blocks) -> None:
        (tmp_path / "s").mkdir(exist_ok=True)
        for rows in blocks:
            np.save(tmp_path / "s" / f"part-{rows[0]:010d}.rows.npy", np.array(rows))
            np.save(tmp_path / "s" / f"part-{rows[0]:010d}.npy", np.ones((len(rows), 4), dtype=np.float32))

    shards([4, 5], [0, 1, 2])
    with pytest.raises(BackendUnavailable, match="returned 5 of 6 embeddings"):
        ray_embedding.merge_shards(tmp_path / "s", tmp_path / "v.npy", rows=6)
    shards([3, 1])
    with pytest.raises(BackendUnavailable, match=r"returned rows 3\.\.1 twice"):
        ray_embedding.merge_shards(tmp_path / "s", tmp_path / "v.npy", rows=6)
