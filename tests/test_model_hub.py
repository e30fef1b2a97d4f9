"""Models by name: ``hf:`` GGUF files from a stand-in hub (a local HTTP server reached through ``HF_ENDPOINT``)
and ``ollama:`` models of a stand-in Ollama server. Nothing here reaches the real network; only the test marked
``model`` loads the downloaded (tiny, bundled) GGUF file."""

from __future__ import annotations

import errno
import hashlib
import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragfunnel.errors import BackendUnavailable, ConfigError, ModelError
from ragfunnel.llm import bundled, hub, registry

pytest.importorskip("huggingface_hub", reason="needs the [hub] extra")

REPO = "someone/tiny-GGUF"
FILE = "tiny.Q4_1.gguf"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


class Server:
    """A local HTTP server in a thread; ``files`` maps a path to bytes, ``requests`` lists what was asked."""

    def __init__(self, answer):
        requests: list[str] = []
        self.requests = requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):  # noqa: N802
                requests.append(f"HEAD {self.path}")
                answer(self, head=True)

            def do_GET(self):  # noqa: N802
                requests.append(f"GET {self.path}")
                answer(self, head=False)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def tiny_model() -> bytes:
    try:
        return bundled.ensure("smollm2-135m", progress=False).read_bytes()
    except ModelError as e:
        pytest.skip(f"the bundled SmolLM2 is not installed: {e}")


@pytest.fixture
def fake_hub(monkeypatch, tmp_path) -> Iterator[tuple[Server, dict[str, bytes]]]:
    """A hub serving ``files`` (``{filename: bytes}`` of REPO) at ``/{repo}/resolve/{revision}/{filename}``, with
    the headers huggingface_hub needs: X-Repo-Commit, ETag, Content-Length. A file named ``cut*`` is cut halfway
    the first time and its retries get no answer; a missing one is a 404 with the hub's X-Error-Code."""
    files: dict[str, bytes] = {}
    gets: dict[str, int] = {}

    def answer(handler: http.server.BaseHTTPRequestHandler, head: bool) -> None:
        prefix = f"/{REPO}/resolve/"
        if not handler.path.startswith(prefix):
            handler.send_response(404)
            handler.send_header("X-Error-Code", "RepoNotFound")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        _revision, _, name = handler.path[len(prefix):].partition("/")
        if name not in files:
            handler.send_response(404)
            handler.send_header("X-Error-Code", "EntryNotFound")
            handler.send_header("X-Repo-Commit", COMMIT)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        body = files[name]
        if not head and name.startswith("cut"):
            gets[name] = gets.get(name, 0) + 1
            if gets[name] > 1:
                handler.close_connection = True
                return  # no answer at all: the connection is gone
        handler.send_response(200)
        handler.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
        handler.send_header("X-Repo-Commit", COMMIT)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if not head:
            handler.wfile.write(body[: len(body) // 2] if name.startswith("cut") else body)
            handler.close_connection = True

    server = Server(answer)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(registry, "_loaded", {})
    yield server, files
    server.close()


def closed_port() -> str:
    """The URL of a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def leftovers(tmp_path: Path) -> list[Path]:
    """Every file under the model cache (hub downloads live there)."""
    return [p for p in (tmp_path / "cache" / "models").rglob("*") if p.is_file()]  # empty when there is no folder


# -- specs --------------------------------------------------------------------------------------------------


def test_a_spec_is_parsed_and_a_bad_one_refused_in_one_line():
    assert hub.parse_hf(f"{REPO}/{FILE}") == hub.HubFile(REPO, FILE, "main")
    assert hub.parse_hf(f"{REPO}/sub/{FILE}@v1.0").filename == f"sub/{FILE}"
    assert hub.parse_hf(f"{REPO}/{FILE}@v1.0").spec == f"hf:{REPO}/{FILE}@v1.0"
    for bad in [REPO, f"{REPO}/weights.safetensors", f"{REPO}/../x.gguf", f"{REPO}/{FILE}@", f"a b/c/{FILE}"]:
        with pytest.raises(ConfigError) as e:
            registry.resolve(f"hf:{bad}")
        assert "hf:OWNER/REPO/FILE.gguf" in one_line(e)


# -- hf: downloads ------------------------------------------------------------------------------------------


def test_pull_downloads_records_the_sha256_and_a_second_pull_asks_nothing(fake_hub, tiny_model, tmp_path):
    server, files = fake_hub
    files[FILE] = tiny_model
    spec = f"hf:{REPO}/{FILE}"
    from ragfunnel.cli.main import main

    first = CliRunner().invoke(main, ["models", "pull", spec])
    assert first.exit_code == 0, first.output
    sha = hashlib.sha256(tiny_model).hexdigest()
    path = tmp_path / "cache" / "models" / "hf" / REPO / "main" / FILE
    assert str(path) in first.stdout and f"SHA-256 {sha}" in first.stdout
    assert path.read_bytes() == tiny_model
    record = json.loads(path.with_name(FILE + ".sha256.json").read_text())
    assert record["sha256"] == sha and record["repo"] == REPO and record["revision"] == "main"
    assert sorted(leftovers(tmp_path)) == sorted([path, path.with_name(FILE + ".sha256.json")])  # nothing staged

    asked = len(server.requests)
    second = CliRunner().invoke(main, ["models", "pull", spec])
    assert second.exit_code == 0 and f"SHA-256 {sha}" in second.stdout
    assert len(server.requests) == asked  # the cache answered
    identity = registry.model_identity(spec)
    assert identity["sha256"] == sha and identity["path"] == str(path)
    assert len(server.requests) == asked


def test_models_listing_still_works_as_a_command(fake_hub):
    from ragfunnel.cli.main import main

    listing = CliRunner().invoke(main, ["models", "--json"])
    assert listing.exit_code == 0
    assert {row["name"] for row in json.loads(listing.stdout)} == set(bundled.BUNDLED)


def test_a_missing_file_or_repository_is_one_line(fake_hub, tmp_path):
    with pytest.raises(ModelError) as e:
        hub.pull(hub.parse_hf(f"{REPO}/nothing.gguf"))
    assert "has no file nothing.gguf" in one_line(e)
    with pytest.raises(ModelError) as e:
        hub.pull(hub.parse_hf(f"nobody/nothing/{FILE}"))
    assert "no repository nobody/nothing" in one_line(e)
    assert leftovers(tmp_path) == []


def test_a_cut_download_is_one_line_and_leaves_no_partial_file(fake_hub, tiny_model, tmp_path, monkeypatch):
    from huggingface_hub import file_download

    monkeypatch.setattr(file_download.time, "sleep", lambda seconds: None)  # its retries, without the waits
    server, files = fake_hub
    files["cut.gguf"] = tiny_model
    with pytest.raises(BackendUnavailable) as e:
        hub.pull(hub.parse_hf(f"{REPO}/cut.gguf"))
    assert "the partial file is removed" in one_line(e) and f"ragfunnel models pull hf:{REPO}/cut.gguf" in str(e.value)
    assert leftovers(tmp_path) == []


def test_a_full_disk_is_one_line_and_leaves_no_partial_file(fake_hub, tiny_model, tmp_path, monkeypatch):
    from huggingface_hub import file_download

    real_get = file_download.http_get

    class FullDisk:
        """The download's file, on a disk that fills up after the first block."""

        def __init__(self, f):
            self.f, self.written = f, 0

        def write(self, data: bytes) -> int:
            if self.written:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(data)
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(file_download, "http_get", lambda url, f, **kw: real_get(url, FullDisk(f), **kw))
    monkeypatch.setattr(file_download.constants, "DOWNLOAD_CHUNK_SIZE", 1 << 16)
    fake_hub[1][FILE] = tiny_model
    with pytest.raises(ConfigError) as e:
        hub.pull(hub.parse_hf(f"{REPO}/{FILE}"))
    assert "is full" in one_line(e) and "RAGFUNNEL_CACHE" in str(e.value)
    assert leftovers(tmp_path) == []


def test_a_file_that_is_not_gguf_is_refused_and_removed(fake_hub, tmp_path):
    fake_hub[1]["page.gguf"] = b"<!doctype html><p>not a model</p>"
    with pytest.raises(ModelError) as e:
        registry.resolve(f"hf:{REPO}/page.gguf")
    assert "not a GGUF file" in one_line(e) and "removed" in str(e.value)
    assert leftovers(tmp_path) == []


def test_a_changed_cached_file_is_refused_naming_the_fix(fake_hub, tiny_model):
    fake_hub[1][FILE] = tiny_model
    file = hub.parse_hf(f"{REPO}/{FILE}")
    pulled = hub.pull(file)
    with pulled.path.open("r+b") as f:  # the same size, one byte changed
        f.seek(1000)
        f.write(b"\x00" if tiny_model[1000:1001] != b"\x00" else b"\x01")
    asked = len(fake_hub[0].requests)
    with pytest.raises(ModelError) as e:
        registry.resolve(file.spec)
    assert "changed since it was downloaded" in one_line(e) and f"ragfunnel models pull {file.spec}" in str(e.value)
    assert len(fake_hub[0].requests) == asked


def test_offline_is_one_line_saying_what_to_run(monkeypatch, tmp_path):
    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http.time, "sleep", lambda seconds: None)  # its retries, without the waits
    monkeypatch.setenv("HF_ENDPOINT", closed_port())
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BackendUnavailable) as e:
        hub.pull(hub.parse_hf(f"{REPO}/{FILE}"))
    assert "cannot reach the Hugging Face hub" in one_line(e) and "ragfunnel models pull" in str(e.value)
    assert leftovers(tmp_path) == []


def test_without_huggingface_hub_the_error_names_the_extra(fake_hub, monkeypatch):
    import sys

    from ragfunnel.errors import MissingExtra

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(MissingExtra) as e:
        hub.pull(hub.parse_hf(f"{REPO}/{FILE}"))
    assert "pip install 'ragfunnel[hub]'" in one_line(e)


@pytest.mark.model
def test_a_pulled_model_answers(fake_hub, tiny_model):
    fake_hub[1][FILE] = tiny_model
    llm = registry.resolve(f"hf:{REPO}/{FILE}")
    assert llm.name == f"hf:{REPO}/{FILE}"
    assert llm.generate(["The capital of France is"], max_tokens=4)[0][0].text


# -- ollama: ------------------------------------------------------------------------------------------------


@pytest.fixture
def fake_ollama(monkeypatch) -> Iterator[Server]:
    names = ["llama3.2:latest", "qwen2.5:0.5b"]

    def answer(handler: http.server.BaseHTTPRequestHandler, head: bool) -> None:
        body = {"/api/tags": {"models": [{"name": n} for n in names]},
                "/v1/models": {"object": "list", "data": [{"id": n, "object": "model"} for n in names]},
                }.get(handler.path)
        data = json.dumps(body).encode()
        handler.send_response(200 if body else 404)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    server = Server(answer)
    monkeypatch.setenv("OLLAMA_HOST", server.url)
    monkeypatch.setattr(registry, "_loaded", {})
    yield server
    server.close()


def test_an_ollama_model_goes_through_the_openai_backend(fake_ollama):
    from ragfunnel.llm.openai import OpenAICompatibleLLM

    llm = registry.resolve("ollama:llama3.2")
    assert isinstance(llm, OpenAICompatibleLLM)
    assert llm.base_urls == (f"{fake_ollama.url}/v1",) and llm.model == "llama3.2:latest"
    assert registry.resolve("ollama:qwen2.5:0.5b").model == "qwen2.5:0.5b"


def test_an_unknown_ollama_model_is_one_line_listing_the_models(fake_ollama):
    with pytest.raises(ModelError) as e:
        registry.resolve("ollama:mistral")
    assert "`ollama pull mistral`" in one_line(e)
    assert "ollama:llama3.2:latest" in str(e.value) and "ollama:qwen2.5:0.5b" in str(e.value)


def test_an_unreachable_ollama_is_one_line(monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", closed_port())
    monkeypatch.setattr(registry, "_loaded", {})
    with pytest.raises(BackendUnavailable) as e:
        registry.resolve("ollama:llama3.2")
    assert "`ollama serve`" in one_line(e) and "`ollama pull llama3.2`" in str(e.value)


def test_ollama_host_forms(monkeypatch):
    for given, url in [("", "http://127.0.0.1:11434"), ("0.0.0.0", "http://127.0.0.1:11434"),
                       ("example.org:8080", "http://example.org:8080"), ("https://h.example/", "https://h.example")]:
        monkeypatch.setenv("OLLAMA_HOST", given)
        assert hub.ollama_url() == url
