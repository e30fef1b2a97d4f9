"""Model files and servers that misbehave: silent corruption, non-GGUF paths, hung or absent servers,
a cache dir that is a file, hub names given as model specs. No model is loaded."""

import hashlib
import http.server
import json
import os
import socket
import sys
import threading
import time

import pytest

from ragfunnel.errors import BackendUnavailable, ConfigError, ModelError
from ragfunnel.llm import bundled, fingerprint, registry
from ragfunnel.llm.openai import OpenAICompatibleLLM
from tests.fake_openai import send_json
from tests.helpers.network import free_port


@pytest.fixture(autouse=True)
def fresh_registry(tmp_path, monkeypatch):
    """A private cache dir, and no model or server timeout left over from other tests (nor leaked to them)."""
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "_loaded", {})
    monkeypatch.setattr(registry, "_server_timeout", None, raising=False)


def rewrite_in_place(path, offset=100):
    """Flip one byte without changing the file's size or mtime (as bit rot, or a careless tool, would)."""
    st = path.stat()
    time.sleep(0.02)  # past the clock tick of the last change, so ctime moves on any filesystem
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def one_line(e: pytest.ExceptionInfo) -> str:
    message = str(e.value)
    assert "\n" not in message
    return message


# -- 1. bundled models: the SHA-256 is checked again whenever the file may have changed ----------


@pytest.fixture
def fake_bundled(chunked_model):
    """test_bundled's two-part 'bundled model' (registered as test-model), with its real SHA-256."""
    return chunked_model[0]


def test_a_byte_changed_with_size_and_mtime_restored_is_caught(fake_bundled):
    path = bundled.ensure("test-model", progress=False)
    assert bundled.status("test-model").ready
    rewrite_in_place(path)
    assert not bundled.status("test-model").ready
    with pytest.raises(ModelError) as e:
        bundled.ensure("test-model", progress=False)
    message = one_line(e)
    assert "corrupt" in message and "ragfunnel models --prepare" in message and str(path) in message
    assert "corrupt" in bundled.status("test-model").note  # the failed check is remembered, not repeated


def test_a_copy_with_preserved_times_is_hashed_again(fake_bundled, monkeypatch):
    path = bundled.ensure("test-model", progress=False)
    copy = path.with_name("copy")
    copy.write_bytes(path.read_bytes())
    st = path.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    copy.replace(path)  # same size and mtime, another inode
    hashed = []
    real = fingerprint.sha256_of_file
    monkeypatch.setattr(fingerprint, "sha256_of_file", lambda p, **kw: hashed.append(p) or real(p, **kw))
    assert bundled.ensure("test-model", progress=False) == path
    assert hashed == [path]


def test_verify_rehashes_what_the_stamp_would_trust(fake_bundled):
    path = bundled.ensure("test-model", progress=False)
    rewrite_in_place(path)
    # Bit rot on the medium changes no metadata: make the record match the changed file's stamp.
    (record,) = (bundled.cache_dir() / "sha256").glob("test.gguf.*.json")
    record.write_text(json.dumps({"stamp": fingerprint.file_stamp(path), "sha256": fake_bundled.sha256}))
    assert bundled.ensure("test-model", progress=False) == path  # the cheap check cannot see it
    with pytest.raises(ModelError, match="corrupt"):
        bundled.verify("test-model", progress=False)
    assert not bundled.status("test-model").ready


def test_verify_of_a_sound_file_passes(fake_bundled):
    path = bundled.ensure("test-model", progress=False)
    assert bundled.verify("test-model", progress=False) == path
    assert bundled.status("test-model").ready


# -- 2. gguf:PATH: checked before llama.cpp, hashed once per version, identified in run configs ---


def gguf_file(tmp_path, body=b"weights" * 100):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + body)
    return path


def test_a_file_rewritten_in_place_gets_a_new_digest(tmp_path):
    path = gguf_file(tmp_path)
    before = fingerprint.file_sha256(path)
    rewrite_in_place(path)
    assert fingerprint.file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest() != before


def test_model_identity_of_a_gguf_file_is_its_hash_computed_once(tmp_path, monkeypatch):
    path = gguf_file(tmp_path)
    identity = registry.model_identity(f"gguf:{path}")
    assert identity == {"spec": f"gguf:{path}", "path": str(path), "bytes": path.stat().st_size,
                        "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    monkeypatch.setattr(fingerprint, "sha256_of_file", lambda *a, **k: pytest.fail("hashed twice"))
    assert registry.model_identity(f"gguf:{path}") == identity
    assert json.loads(json.dumps(identity)) == identity  # goes into config.json as it is


def test_model_identity_of_bundled_and_server_specs(monkeypatch):
    assert registry.model_identity("bundled:qwen2.5-1.5b") == {
        "spec": "bundled:qwen2.5-1.5b", "sha256": bundled.get("qwen2.5-1.5b").sha256}
    assert registry.model_identity("openai:http://10.0.0.1:8000/v1/#qwen") == {
        "spec": "openai:http://10.0.0.1:8000/v1/#qwen", "url": "http://10.0.0.1:8000/v1", "model": "qwen"}
    with pytest.raises(ConfigError, match="unknown model spec"):
        registry.model_identity("qwen")


def test_the_llm_fingerprint_is_the_recorded_hash(tmp_path):
    path = gguf_file(tmp_path)
    llm = registry.resolve(f"gguf:{path}")
    assert llm.fingerprint == registry.model_identity(f"gguf:{path}")["sha256"]


def not_a_gguf(tmp_path, kind):
    if kind == "missing":
        return tmp_path / "absent.gguf"
    if kind == "directory":
        return tmp_path
    path = tmp_path / f"{kind}.gguf"
    path.write_bytes(b"hello, not weights" if kind == "text" else b"")
    return path


@pytest.mark.parametrize("kind, match", [
    ("missing", "does not exist"), ("directory", "is a directory"), ("text", "not a GGUF file"),
    ("empty", "not a GGUF file"),
])
def test_a_gguf_spec_that_is_no_gguf_file_fails_before_llama_cpp(tmp_path, monkeypatch, kind, match):
    path = not_a_gguf(tmp_path, kind)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # any import of llama.cpp would fail loudly
    with pytest.raises(ModelError, match=match) as e:
        registry.resolve(f"gguf:{path}")
    assert str(path) in one_line(e)


# -- 3. OpenAI-compatible servers that hang or are absent -----------------------------------------


@pytest.fixture
def hung_server():
    """Accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held, stop = [], threading.Event()

    def accept():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_a_hung_server_costs_about_the_timeout_not_four_of_them(hung_server):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    llm = OpenAICompatibleLLM(hung_server, "m", timeout=1)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as e:
        llm.generate(["hi"])
    assert time.monotonic() - started < 4
    assert hung_server in one_line(e) and "timeout" in str(e.value)


def test_set_server_timeout_reaches_models_resolved_before_and_after(hung_server):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    before = registry.resolve(f"openai:{hung_server}#a")
    registry.set_server_timeout(1.0)
    after = registry.resolve(f"openai:{hung_server}#b")
    assert before.timeout == after.timeout == 1.0
    for llm in (before, after):
        started = time.monotonic()
        with pytest.raises(BackendUnavailable):
            llm.generate(["hi"])
        assert time.monotonic() - started < 4
    with pytest.raises(ConfigError, match="^timeout must be a positive number of seconds"):
        registry.set_server_timeout(0)


def test_check_backends_names_a_closed_port_and_the_fix():
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    url = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as e:
        registry.check_backends([f"openai:{url}#m"])
    assert time.monotonic() - started < 3
    assert one_line(e) == f"cannot reach {url}: connection refused; start the server or fix the URL"


def test_check_backends_gives_up_on_a_hung_server(hung_server):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    registry.set_server_timeout(1.0)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="did not answer"):
        registry.check_backends([f"openai:{hung_server}#m"])
    assert time.monotonic() - started < 4


class _Models(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802 - http.server's naming
        send_json(self, {"data": [{"id": "m"}]}, type(self).status)

    def log_message(self, *args):
        pass


@pytest.fixture
def models_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    _Models.status = 200


def test_check_backends_passes_live_servers_and_checks_local_files(models_server, tmp_path):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    registry.check_backends([f"openai:{models_server}#m", f"gguf:{gguf_file(tmp_path)}"])
    with pytest.raises(ModelError, match="not a GGUF file"):
        registry.check_backends([f"gguf:{not_a_gguf(tmp_path, 'text')}"])


def test_check_backends_reports_a_rejected_api_key(models_server):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    _Models.status = 401
    with pytest.raises(BackendUnavailable, match="OPENAI_API_KEY"):
        registry.check_backends([f"openai:{models_server}#m"])


# -- 4. RAGFUNNEL_CACHE that is no directory ------------------------------------------------------


def test_a_cache_env_naming_a_file_is_one_config_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(blocker))
    with pytest.raises(ConfigError) as e:
        bundled.cache_dir()
    assert one_line(e) == (f"RAGFUNNEL_CACHE={blocker} is a file, not a directory; "
                           "point it at a directory or unset it")


def test_assembling_into_an_unwritable_cache_is_one_config_error(fake_bundled, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(blocker / "cache"))  # mkdir fails, even as root
    with pytest.raises(ConfigError, match="RAGFUNNEL_CACHE") as e:
        bundled.ensure("test-model", progress=False)
    assert str(blocker / "cache") in one_line(e)


# -- 5. Hugging Face names are no LLM specs: refused at once, no network -------------------------


@pytest.mark.parametrize("spec", ["hf:Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"])
def test_a_hub_name_is_refused_offline_with_the_way_to_run_it(spec, monkeypatch):
    monkeypatch.setattr(socket.socket, "connect", lambda *a: pytest.fail("reached for the network"))
    with pytest.raises(ConfigError, match="unknown model spec") as e:
        registry.resolve(spec)
    assert "Hugging Face" in one_line(e) and "gguf:PATH" in str(e.value) and "openai:" in str(e.value)


def test_models_verify_rehashes_from_the_cli(fake_bundled, monkeypatch):
    from click.testing import CliRunner

    from ragfunnel.cli.main import main

    monkeypatch.setattr(bundled, "BUNDLED", {"test-model": fake_bundled})
    sound = CliRunner().invoke(main, ["models", "--verify"])
    assert sound.exit_code == 0 and "bundled:test-model" in sound.output and "ready" in sound.output
    rewrite_in_place(bundled.target_path(fake_bundled))
    broken = CliRunner().invoke(main, ["models", "--verify"])
    assert broken.exit_code == 1 and broken.output.count("\n") == 1
    assert broken.output.startswith("error: ") and "corrupt" in broken.output
