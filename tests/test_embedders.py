"""Embedders by spec (``ragfunnel.retrieve.embedders``) and the indexes built with them.

Unit tests use tests/fake_openai.py's embeddings (letter counts) served in a thread, so no model loads;
the ``model`` tests read the bundled MiniLM's own Hugging Face directory with transformers.
"""

import hashlib
import json

import numpy as np
import pytest
from click.testing import CliRunner

from ragfunnel.cli.main import main
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_manifest import IndexConfig
from ragfunnel.errors import BackendUnavailable, ConfigError, InputError, ModelError
from ragfunnel.retrieve.embedders import SERVER_BATCH, EmbedderInfo, RecordedEmbedder, resolve_embedder
from ragfunnel.retrieve.rerank import BiEncoderPreRanker, load_pre_ranker
from tests.fake_openai import letter_counts
from tests.helpers.embedders import DOCS, one_line
from tests.helpers.network import free_port

pytest.importorskip("networkx", reason="needs the [corpus] extra")


def letters(texts: list[str]) -> np.ndarray:
    """What the fake server's embedder gives: letter counts, unit length."""
    v = np.array([letter_counts(t) for t in texts], dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("spec", ["minilm", "bundled:e5", "hf:", "openai:localhost:8000/v1#m",
                                  "openai:http://localhost:8000/v1", "openai:http://localhost:8000/v1#", "gguf:x.gguf"])
def test_a_spec_naming_no_embedder_is_one_line_listing_the_forms(spec):
    with pytest.raises(ConfigError) as e:
        resolve_embedder(spec)
    message = one_line(e)
    assert repr(spec) in message
    forms = ("bundled:minilm", "hf:NAME_OR_DIR", "a model directory", "openai:URL#MODEL")
    assert all(form in message for form in forms)


def test_an_embedder_spec_listing_several_servers_is_refused():
    with pytest.raises(ConfigError, match="lists several servers; an embedder spec takes one: openai:URL#MODEL"):
        resolve_embedder("openai:http://a:8000/v1,http://b:8000/v1#m")


def test_a_model_that_is_not_there_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for spec, why in [(f"hf:{tmp_path / 'none'}", "does not exist"), (str(tmp_path / "empty"), "no config.json"),
                      ("hf:nobody-here/no-such-encoder", "not found locally")]:
        with pytest.raises(ModelError) as e:
            resolve_embedder(spec)
        assert why in one_line(e)


def test_a_server_embedder_sends_batches_and_returns_unit_rows_in_input_order(embedding_server):
    url, requests = embedding_server
    texts = [f"text {'ab' * i}" for i in range(SERVER_BATCH + 6)]
    embedder = resolve_embedder(f"openai:{url}/#m")
    vectors = embedder.encode(texts)
    # In input order, though the server lists its rows reversed.
    assert vectors.dtype == np.float32 and np.allclose(vectors, letters(texts), atol=1e-6)
    assert [(r["model"], len(r["input"])) for r in requests] == [("m", SERVER_BATCH), ("m", 6)]
    assert embedder.dim == 27 and embedder.spec == embedder.identity == f"openai:{url}#m"


def test_an_unreachable_server_is_one_line(monkeypatch):
    from ragfunnel.retrieve.embedders import OpenAIEmbedder

    monkeypatch.setattr(OpenAIEmbedder, "backoff_seconds", 0.0)
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(BackendUnavailable) as e:
        resolve_embedder(f"openai:{url}#m").encode(["x"])
    assert one_line(e).startswith(f"cannot reach {url}/embeddings: ") and one_line(e).endswith("(3 attempts)")


@pytest.fixture
def busy_server():
    """An embeddings server answering HTTP 503 to its first ``busy[0]`` requests, then letter counts."""
    import http.server
    import threading

    busy = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            texts = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["input"]
            status, body = (503, {"error": "busy"}) if busy[0] > 0 else (200, {"data": [
                {"index": i, "embedding": letter_counts(t)} for i, t in enumerate(texts)]})
            busy[0] -= 1
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1", busy
    server.shutdown()
    server.server_close()


def test_a_busy_server_is_asked_again_and_one_that_stays_busy_is_one_line(busy_server, monkeypatch):
    from ragfunnel.retrieve.embedders import OpenAIEmbedder

    pytest.importorskip("httpx", reason="needs the [openai] extra")
    monkeypatch.setattr(OpenAIEmbedder, "backoff_seconds", 0.0)
    url, busy = busy_server
    busy[0] = 2  # two 503s, then an answer: within the three attempts
    vectors = OpenAIEmbedder(url, "m").encode(["abc", "xyz"])
    assert vectors.shape[0] == 2 and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    busy[0] = 3
    with pytest.raises(BackendUnavailable) as e:
        OpenAIEmbedder(url, "m").encode(["abc"])
    assert one_line(e) == f"{url}/embeddings kept answering HTTP 503; check the server's load and logs (3 attempts)"


def test_an_index_records_its_embedder_and_encodes_queries_and_documents_with_it(tmp_path, embedding_server):
    url, requests = embedding_server
    spec = f"openai:{url}#m"
    built = build_index(DOCS, tmp_path / "ix", IndexConfig(flat=True, embed_documents=True, embedder=spec),
                        source="test")
    recorded = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert recorded["embedder"] == {"spec": spec, "identity": spec, "dim": 27}
    ix = CorpusIndex(tmp_path / "ix", remote_embedder=spec)  # the operator trusts the server it built with
    assert ix.manifest == built and ix.embedder.spec == spec
    passages = [f"{d.title}\n{d.text}" for d in DOCS]  # one passage per document
    assert np.allclose(ix._vectors, letters(passages), atol=1e-6)
    assert np.allclose(ix.document_vectors, letters([d.render() for d in DOCS]), atol=1e-6)

    requests.clear()
    best, scores = ix.flat_search(passages[2], 2, exact=True)
    assert best[0] == 2 and scores[0] == pytest.approx(1.0) and requests == [{"model": "m", "input": [passages[2]]}]
    # The default pre-ranker reads the stored vectors and encodes the question with the index's embedder too.
    question, docs = "Who kept the Gull Rock light?", [ix.document(i) for i in range(len(DOCS))]
    stored = load_pre_ranker("minilm", stored=ix.document_vectors, embedder=ix.embedder).score(question, docs)
    encoded = BiEncoderPreRanker(ix.embedder).score(question, DOCS)  # no positions: encoded now
    assert np.allclose(stored, encoded, atol=1e-6)
    assert np.allclose(stored, letters([d.render() for d in DOCS]) @ letters([question])[0], atol=1e-6)


def test_the_same_embedder_keeps_an_index_and_another_needs_force(tmp_path, embedding_server):
    url, requests = embedding_server
    spec = f"openai:{url}#m"
    first = build_index(DOCS, tmp_path / "ix", IndexConfig(flat=True, embedder=spec), source="test")
    requests.clear()
    assert build_index(DOCS, tmp_path / "ix", IndexConfig(flat=True, embedder=spec), source="test") == first
    assert not requests
    with pytest.raises(ConfigError, match="set force"):  # the bundled MiniLM: another configuration
        build_index(DOCS, tmp_path / "ix", IndexConfig(flat=True), source="test")


def test_searching_with_the_embedder_gone_is_one_line_naming_it(tmp_path, embedding_server, monkeypatch):
    from ragfunnel.retrieve.embedders import OpenAIEmbedder

    monkeypatch.setattr(OpenAIEmbedder, "backoff_seconds", 0.01)  # a refused connection is asked again: no wait
    url, _ = embedding_server
    spec = f"openai:{url}#m"
    build_index(DOCS, tmp_path / "ix", IndexConfig(flat=True, embedder=spec), source="test")
    moved = tmp_path / "ix" / "manifest.json"
    gone = f"http://127.0.0.1:{free_port()}/v1"
    forged = json.loads(moved.read_text().replace(url, gone))  # as if the server had moved away since
    forged["manifest_sha256"] = sha256_of_fields(forged)
    moved.write_text(json.dumps(forged))
    with pytest.raises(BackendUnavailable) as e:
        CorpusIndex(tmp_path / "ix", remote_embedder=f"openai:{gone}#m").flat_search("Who kept the light?", 1)
    message = one_line(e)
    assert f"was built with the embedder openai:{gone}#m, which fails here (cannot reach {gone}" in message
    assert f" --flat --embedder openai:{gone}#m --faiss flat --force`" in message
    result = CliRunner().invoke(main, ["search", str(tmp_path / "ix"), "Who kept the light?", "--flat",
                                       "--remote-embedder", f"openai:{gone}#m"])
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1
    assert f"openai:{gone}#m" in result.stderr


def sha256_of_fields(manifest: dict) -> str:
    """A manifest's checksum as ragfunnel computes it: canonical JSON of every field but the checksum itself."""
    fields = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def test_indexes_of_the_bundled_minilm_carry_no_embedder_field_so_older_ones_still_open(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    monkeypatch.setattr("ragfunnel.corpus.index_build._embed", lambda texts, desc, **_: unit_rows(rng, len(texts), 384))
    build_index(DOCS, tmp_path / "ix", IndexConfig(flat=True, embed_documents=True), source="test")
    written = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    # The checksum of a manifest written before embedders existed, which had no such field.
    assert "embedder" not in written and written["manifest_sha256"] == sha256_of_fields(written)
    ix = CorpusIndex(tmp_path / "ix")
    assert ix.manifest.embedder is None and ix.embedder.spec == "bundled:minilm" and ix.embedder.dim == 384


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_an_edited_or_inconsistent_embedder_field_is_refused(tmp_path, embedding_server):
    url, _ = embedding_server
    spec = f"openai:{url}#m"
    build_index(DOCS, tmp_path / "ix", IndexConfig(flat=True, embedder=spec), source="test")
    path = tmp_path / "ix" / "manifest.json"
    original = path.read_text()
    path.write_text(original.replace('"dim": 27', '"dim": 28'))
    with pytest.raises(InputError, match="was altered"):
        CorpusIndex(tmp_path / "ix")
    forged = json.loads(original)
    forged["embedder"]["dim"] = 28
    forged["manifest_sha256"] = sha256_of_fields(forged)
    path.write_text(json.dumps(forged))
    with pytest.raises(InputError, match=r"flat.vectors.npy holds vectors of shape \(27,\) where the manifest's "
                                         r"embedder gives 28-d ones; rebuild it with .* --embedder openai:"):
        CorpusIndex(tmp_path / "ix", remote_embedder=spec)
    forged["embedder"] = {"spec": "x", "dim": 27}
    forged["manifest_sha256"] = sha256_of_fields(forged)
    path.write_text(json.dumps(forged))
    with pytest.raises(InputError, match="is corrupted .'embedder' is not"):
        CorpusIndex(tmp_path / "ix")


def test_an_embedder_whose_weights_changed_is_refused(embedding_server):
    url, _ = embedding_server
    info = EmbedderInfo(spec=f"openai:{url}#m", identity="sha256:of-other-weights", dim=27)
    with pytest.raises(ModelError) as e:
        RecordedEmbedder(info, where="indexes/x", fix="rebuild it", trusted=info.spec).encode(["q"])
    assert one_line(e) == (f"indexes/x was built with another version of the embedder openai:{url}#m (its weights "
                           "have changed since); rebuild it")


def test_an_embedder_needs_something_to_embed(tmp_path):
    with pytest.raises(ConfigError) as e:
        build_index(DOCS, tmp_path / "ix", IndexConfig(embedder="openai:http://localhost:1/v1#m"), source="test")
    assert one_line(e) == ("embedder=openai:http://localhost:1/v1#m embeds flat passages and documents; set flat "
                           "(or embed_documents) too")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in DOCS))
    result = CliRunner().invoke(main, ["index", str(corpus), "--out", str(tmp_path / "ix"), "--embedder", "nope"])
    assert result.exit_code == 1 and result.stderr.startswith("error: --embedder=nope embeds flat passages")
    result = CliRunner().invoke(main, ["index", str(corpus), "--out", str(tmp_path / "ix"), "--flat", "--embedder",
                                       "nope"])
    assert result.exit_code == 1 and result.stderr.startswith("error: unknown embedder 'nope'; pass bundled:minilm")
    assert not any((tmp_path / "ix").iterdir())  # nothing built


@pytest.mark.model
def test_the_bundled_minilm_directory_read_by_transformers_gives_the_bundled_vectors():
    from ragfunnel.retrieve.embed import bundled_embedder, minilm_directory

    texts = ["Martha Quill kept the Gull Rock light.", "The island ferry runs twice daily.", "puffins",
             "A lighthouse of granite, built in 1871 on a rock off the coast, " * 4]
    hf = resolve_embedder(f"hf:{minilm_directory()}")
    assert resolve_embedder(str(minilm_directory())).spec == hf.spec == f"hf:{minilm_directory().resolve()}"
    assert hf.identity.startswith("sha256:") and hf.dim == 384
    vectors, bundled = hf.encode(texts), bundled_embedder().encode(texts)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert ((vectors * bundled).sum(axis=1) > 0.99).all()  # fp32 against the bundled int8


@pytest.mark.model
def test_index_and_search_with_a_model_directory_as_embedder(tmp_path):
    from ragfunnel.retrieve.embed import minilm_directory

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in DOCS))
    result = CliRunner().invoke(main, ["index", str(corpus), "--out", str(tmp_path / "ix"), "--flat", "--embedder",
                                       str(minilm_directory())])
    assert result.exit_code == 0, result.stderr
    assert f"embedded by hf:{minilm_directory().resolve()} (384-d)" in result.stdout
    result = CliRunner().invoke(main, ["search", str(tmp_path / "ix"), "Who wrote diaries about puffins?", "--flat",
                                       "--json", "--top-k", "1"])
    assert result.exit_code == 0, result.stderr
    assert [r["id"] for r in json.loads(result.stdout)["results"]] == ["quill"]
