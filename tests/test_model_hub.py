"""Models by name: ``hf:`` GGUF files from a stand-in hub (a local HTTP server reached through ``HF_ENDPOINT``)
and ``ollama:`` models of a stand-in Ollama server. Nothing here reaches the real network; only the test marked
``model`` loads the downloaded (tiny, bundled) GGUF file."""

from __future__ import annotations

import errno
import hashlib
import http.server
import json
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragfunnel.errors import BackendUnavailable, ConfigError, ModelError
from ragfunnel.llm import bundled, hub, registry
from ragfunnel.types import SamplingParams

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


def test_two_specs_never_share_a_cache_path():
    in_a_folder = hub.parse_hf("t/good/sub/m.gguf")  # revision main, file sub/m.gguf
    slashed_revision = hub.parse_hf("t/good/m.gguf@main/sub")  # revision main/sub, file m.gguf
    assert in_a_folder.path != slashed_revision.path
    assert slashed_revision.path.parent.name == "main%2Fsub"
    for revision in [".", "main/.hidden", "a/../b"]:  # a '.' part would let two revisions meet in one folder
        with pytest.raises(ConfigError) as e:
            hub.HubFile("t/good", "m.gguf", revision)
        assert "bad revision" in one_line(e)


@pytest.mark.parametrize("spec, problem", [
    (f"{REPO}/" + "x" * 5000 + ".gguf", "characters long"),
    (f"{REPO}/" + "d/" * 600 + "m.gguf", "characters long"),  # every name short, the whole too long
    (f"{REPO}/" + "x" * 300 + ".gguf", "a name of 305 bytes"),
    (f"{REPO}/" + "\u00e9" * 120 + ".gguf", "a name of 245 bytes"),  # bytes, as the file system counts them
    (f"{REPO}/{FILE}@" + "b" * 300, "a name of 300 bytes"),
    (f"{REPO}/a\x00b.gguf", "holds the character"),
    (f"{REPO}/a\udcffb.gguf", "holds the character"),  # a byte of a non-UTF-8 argument: no hub name has it
])
def test_an_oversized_or_impossible_spec_is_one_short_line(spec, problem, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError) as e:
        registry.resolve(f"hf:{spec}")
    message = one_line(e)
    assert problem in message and "check" in message and len(message) < 300, message
    assert "RAGFUNNEL_CACHE" not in message
    assert not (tmp_path / "cache").exists()  # refused before the cache is touched


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


def test_a_cut_download_is_one_line_and_leaves_no_partial_file(fake_hub, tiny_model, tmp_path, capfd):
    server, files = fake_hub
    files["cut.gguf"] = tiny_model
    with pytest.raises(BackendUnavailable) as e:
        hub.pull(hub.parse_hf(f"{REPO}/cut.gguf"), progress=False, limits=hub.DownloadLimits(backoff=0))
    assert "the partial file is removed" in one_line(e) and f"ragfunnel models pull hf:{REPO}/cut.gguf" in str(e.value)
    assert capfd.readouterr().err == ""  # that one line is all the user sees
    assert leftovers(tmp_path) == []


def test_a_full_disk_is_one_line_and_leaves_no_partial_file(fake_hub, tiny_model, tmp_path, monkeypatch):
    real_write = hub._Received.write

    def full_after_the_first_block(received, chunk: bytes) -> None:
        """The download's file, on a disk that fills up after the first block."""
        if received.size:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(received, chunk)

    monkeypatch.setattr(hub._Received, "write", full_after_the_first_block)
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
    monkeypatch.setenv("HF_ENDPOINT", closed_port())
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(BackendUnavailable) as e:
        hub.pull(hub.parse_hf(f"{REPO}/{FILE}"), limits=hub.DownloadLimits(backoff=0))
    assert "cannot reach the Hugging Face hub" in one_line(e) and "ragfunnel models pull" in str(e.value)
    assert leftovers(tmp_path) == []
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # set after huggingface_hub was imported: still honoured
    with pytest.raises(BackendUnavailable) as e:
        hub.pull(hub.parse_hf(f"{REPO}/{FILE}"))
    assert "HF_HUB_OFFLINE is set" in one_line(e)


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
    assert llm.generate(["The capital of France is"], SamplingParams(max_tokens=4))[0][0].text


# -- hostile hubs: each test builds its own ------------------------------------------------------------------

GGUF = b"GGUF" + bytes(range(256)) * 40  # enough of a GGUF file for the magic check: 10244 bytes


@pytest.fixture
def own_hub(monkeypatch, tmp_path) -> Iterator:
    """``own_hub(answer)`` starts a stand-in hub whose files (``/REPO/resolve/...``) ``answer(handler, head)`` serves,
    and points HF_ENDPOINT and the cache at it and ``tmp_path``. What huggingface_hub asks for itself (its agent
    registry, at most daily) is a 404, so that ``answer`` sees only the download."""
    servers: list[Server] = []
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(registry, "_loaded", {})

    def start(answer) -> Server:
        def files_only(handler, head: bool) -> None:
            if handler.path.startswith(f"/{REPO}/resolve/"):
                answer(handler, head)
            else:
                send_headers(handler, 404, Content_Length=0)

        server = Server(files_only)
        servers.append(server)
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        return server

    yield start
    for server in servers:
        server.close()


def send_headers(handler: http.server.BaseHTTPRequestHandler, status: int = 200, **headers: object) -> None:
    handler.send_response(status)
    handler.send_header("X-Repo-Commit", COMMIT)
    handler.send_header("ETag", '"etag"')
    for name, value in headers.items():
        handler.send_header(name.replace("_", "-"), str(value))
    handler.end_headers()


def stream_until_refused(handler: http.server.BaseHTTPRequestHandler, most: int) -> int:
    """Send bytes until the client hangs up (or ``most`` are sent, so a test cannot hang); how many went out."""
    block, sent = b"\x00" * (1 << 16), 0
    try:
        while sent < most:
            handler.wfile.write(block)
            sent += len(block)
    except OSError:  # the client stopped reading and closed the connection
        pass
    handler.close_connection = True
    return sent


@pytest.mark.parametrize("announce_by", ["Content-Length", "X-Linked-Size"])
def test_a_download_stops_as_soon_as_it_passes_the_announced_size(own_hub, tmp_path, announce_by):
    sent: queue.Queue[int] = queue.Queue()  # what each endless answer got out, once the client hung up

    def answer(handler, head: bool) -> None:
        if head:  # the metadata: 1 KB
            send_headers(handler, **{announce_by.replace("-", "_"): 1024})
        elif announce_by == "Content-Length":
            send_headers(handler)  # no length at all, then bytes without end
            sent.put(stream_until_refused(handler, 128 << 20))
        else:
            send_headers(handler, Content_Length=400 << 20)  # a GET that announces 400 MB
            sent.put(stream_until_refused(handler, 128 << 20))

    own_hub(answer)
    with pytest.raises(ModelError) as e:
        hub.pull(hub.parse_hf(f"{REPO}/{FILE}"), limits=hub.DownloadLimits(backoff=0))
    assert "announced 1024 bytes" in one_line(e) and "stopped and removed" in str(e.value)
    assert sent.get(timeout=30) < 32 << 20 and sent.empty()  # it hung up at once: out went what the sockets buffer
    assert leftovers(tmp_path) == []


def test_a_download_of_no_announced_size_stops_at_the_cap(own_hub, tmp_path):
    sent: queue.Queue[int] = queue.Queue()  # what each endless answer got out, once the client hung up

    def answer(handler, head: bool) -> None:
        send_headers(handler)  # no size anywhere
        if not head:
            sent.put(stream_until_refused(handler, 128 << 20))

    own_hub(answer)
    with pytest.raises(ModelError) as e:
        hub.pull(hub.parse_hf(f"{REPO}/{FILE}"), limits=hub.DownloadLimits(max_bytes=1 << 20, backoff=0))
    assert "announced no size" in one_line(e) and f"more than {1 << 20} bytes" in str(e.value)
    assert sent.get(timeout=30) < 32 << 20 and sent.empty()
    assert leftovers(tmp_path) == []
    assert hub.DownloadLimits().max_bytes == 64 << 30  # a cap there is, by default
    with pytest.raises(ConfigError) as e:
        hub.DownloadLimits(attempts=0)
    assert "attempts must be at least 1" in one_line(e)


def test_a_download_that_keeps_breaking_off_gives_up_in_one_line(own_hub, tmp_path, capfd, caplog):
    def answer(handler, head: bool) -> None:
        """Every GET sends 100 more bytes of the asked range, then hangs up: progress each time, never the end."""
        if head:
            send_headers(handler, Content_Length=len(GGUF))
            return
        start = int(handler.headers.get("Range", "bytes=0-")[6:].rstrip("-"))
        send_headers(handler, 206 if start else 200, Content_Length=len(GGUF) - start,
                     Content_Range=f"bytes {start}-{len(GGUF) - 1}/{len(GGUF)}")
        handler.wfile.write(GGUF[start:start + 100])
        handler.close_connection = True

    server = own_hub(answer)
    spec = f"hf:{REPO}/{FILE}"
    with caplog.at_level(logging.WARNING), pytest.raises(BackendUnavailable) as e:
        hub.pull(hub.parse_hf(spec[3:]), progress=False, limits=hub.DownloadLimits(attempts=4, backoff=0))
    assert "failed 4 times" in one_line(e) and f"`ragfunnel models pull {spec}` again" in str(e.value)
    gets = [r for r in server.requests if r.startswith(f"GET /{REPO}/resolve/")]
    assert len(gets) == 4  # bounded, though every GET brought new bytes
    assert capfd.readouterr().err == "" and caplog.records == []  # no retry warnings of the hub library
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("honours_range", [True, False])
def test_a_broken_download_is_resumed_and_lands_whole(own_hub, honours_range):
    asked: list[str] = []

    def answer(handler, head: bool) -> None:
        if head:
            send_headers(handler, Content_Length=len(GGUF))
            return
        asked.append(handler.headers.get("Range", ""))
        start = int(asked[-1][6:].rstrip("-")) if asked[-1] and honours_range else 0
        if start:
            send_headers(handler, 206, Content_Length=len(GGUF) - start,
                         Content_Range=f"bytes {start}-{len(GGUF) - 1}/{len(GGUF)}")
        else:
            send_headers(handler, Content_Length=len(GGUF))
        handler.wfile.write(GGUF[start:start + 5000] if len(asked) == 1 else GGUF[start:])  # the first one cut
        handler.close_connection = True

    own_hub(answer)
    pulled = hub.pull(hub.parse_hf(f"{REPO}/{FILE}"), limits=hub.DownloadLimits(backoff=0))
    assert asked == ["", "bytes=5000-"]
    assert pulled.path.read_bytes() == GGUF and pulled.sha256 == hashlib.sha256(GGUF).hexdigest()


def test_specs_that_once_shared_a_path_download_their_own_files(own_hub):
    served = {f"/{REPO}/resolve/main/sub/m.gguf": GGUF + b"first",
              f"/{REPO}/resolve/main%2Fsub/m.gguf": GGUF + b"second"}

    def answer(handler, head: bool) -> None:
        if handler.path not in served:
            send_headers(handler, 404, X_Error_Code="EntryNotFound", Content_Length=0)
            return
        send_headers(handler, Content_Length=len(served[handler.path]))
        if not head:
            handler.wfile.write(served[handler.path])

    own_hub(answer)
    in_a_folder, slashed_revision = hub.parse_hf(f"{REPO}/sub/m.gguf"), hub.parse_hf(f"{REPO}/m.gguf@main/sub")
    first, second = hub.pull(in_a_folder), hub.pull(slashed_revision)
    assert second.downloaded and first.path != second.path
    assert first.path.read_bytes().endswith(b"first") and second.path.read_bytes().endswith(b"second")
    # a record of another spec (a cache of the old layout) is no answer for this one
    other = hub.parse_hf(f"{REPO}/other.gguf")
    other.path.write_bytes(first.path.read_bytes())
    other.record.write_text(in_a_folder.record.read_text())
    assert hub.cached(other) is None and hub.cached(in_a_folder).sha256 == first.sha256


def test_the_token_goes_to_the_hub_and_never_to_the_storage_it_redirects_to(own_hub, monkeypatch):
    seen: dict[str, list[str | None]] = {"hub": [], "storage": []}

    def storage_answer(handler, head: bool) -> None:
        seen["storage"].append(handler.headers.get("Authorization"))
        send_headers(handler, Content_Length=len(GGUF))
        if not head:
            handler.wfile.write(GGUF)

    storage = Server(storage_answer)
    try:
        def hub_answer(handler, head: bool) -> None:  # the file's bytes are elsewhere, as the hub's LFS files are
            seen["hub"].append(handler.headers.get("Authorization"))
            send_headers(handler, 302, Location=storage.url.replace("127.0.0.1", "localhost") + "/blob",
                         X_Linked_Size=len(GGUF), Content_Length=0)

        own_hub(hub_answer)
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        pulled = hub.pull(hub.parse_hf(f"{REPO}/{FILE}"))
    finally:
        storage.close()
    assert pulled.path.read_bytes() == GGUF
    assert seen == {"hub": ["Bearer hf_secret"], "storage": [None]}


def test_download_folders_of_dead_pulls_are_removed_and_live_ones_kept(own_hub, tmp_path):
    def answer(handler, head: bool) -> None:
        send_headers(handler, Content_Length=len(GGUF))
        if not head:
            handler.wfile.write(GGUF)

    own_hub(answer)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its process id now names no process
    partials = hub.partial_dir()
    partials.mkdir(parents=True)
    here = hub._host_tag()
    folders = {"sigkilled": partials / f"{here}-{dead.pid}-abcd1234.partial",
               "live here": partials / f"{here}-{os.getpid()}-abcd1234.partial",
               "live elsewhere": partials / f"0123456789ab-{dead.pid}-abcd1234.partial",
               "dead elsewhere": partials / f"0123456789ab-{os.getpid()}-dcba4321.partial"}
    for folder in folders.values():
        folder.mkdir()
        (folder / "download.gguf").write_bytes(b"GGUF half")
    long_ago = time.time() - hub.STALE_PARTIAL_SECONDS - 60
    for path in (folders["dead elsewhere"] / "download.gguf", folders["dead elsewhere"]):
        os.utime(path, (long_ago, long_ago))

    hub.pull(hub.parse_hf(f"{REPO}/{FILE}"))
    assert {name for name, folder in folders.items() if folder.exists()} == {"live here", "live elsewhere"}
    assert len(list(partials.iterdir())) == 2  # and the pull's own folder is gone


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
