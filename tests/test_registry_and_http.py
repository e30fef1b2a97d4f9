"""Model specs, and the HTTP backend against servers that are down or failing (no model needed)."""

import http.server
import threading

import pytest

from ragfunnel.errors import BackendUnavailable, ConfigError, ModelError
from ragfunnel.llm import registry
from ragfunnel.llm.llamacpp import LlamaCppLLM
from ragfunnel.llm.openai import OpenAICompatibleLLM
from ragfunnel.types import SamplingParams
from tests.helpers.network import _Flaky, free_port


@pytest.mark.parametrize("spec, match", [
    ("qwen", "unknown model spec"),
    ("hub:foo", "unknown model spec"),
    ("bundled:nope", "valid: qwen2.5-0.5b"),
    ("openai:localhost:8000", "openai:http://HOST:PORT/v1#MODEL"),
    ("gguf:", "names nothing"),
])
def test_bad_specs_are_named(spec, match):
    with pytest.raises(ConfigError, match=match):
        registry.resolve(spec)


def test_openai_spec_resolves_without_connecting():
    llm = registry.resolve(f"openai:http://127.0.0.1:{free_port()}/v1#m")
    assert isinstance(llm, OpenAICompatibleLLM) and llm.model == "m"


def test_missing_gguf_file_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        LlamaCppLLM(tmp_path / "none.gguf").warm_up()


def test_corrupt_gguf_file_is_a_model_error(tmp_path):
    pytest.importorskip("llama_cpp")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 4096)
    with pytest.raises(ModelError, match="could not load"):
        LlamaCppLLM(bad).warm_up()


def test_unreachable_server_is_backend_unavailable():
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    llm = OpenAICompatibleLLM(f"http://127.0.0.1:{free_port()}/v1", "m", max_retries=1, timeout=2)
    llm.backoff_seconds = 0.01
    with pytest.raises(BackendUnavailable, match="cannot connect"):
        llm.generate(["hi"])


@pytest.fixture
def flaky_server():
    _Flaky.seen, _Flaky.refuse_grammar = [], False
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    _Flaky.refuse_grammar = False  # the handler class is shared with other test modules


def test_transient_failures_are_retried_then_succeed(flaky_server):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    _Flaky.fail_first = 2
    llm = OpenAICompatibleLLM(f"http://127.0.0.1:{flaky_server.server_port}/v1", "m", max_retries=3)
    llm.backoff_seconds = 0.01
    (out,) = llm.generate(["hi"])
    assert out[0].text == "ok 3" and out[0].prompt_tokens == 7


def test_persistent_failure_gives_up_with_a_clear_error(flaky_server):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    _Flaky.fail_first = 100
    llm = OpenAICompatibleLLM(f"http://127.0.0.1:{flaky_server.server_port}/v1", "m", max_retries=2)
    llm.backoff_seconds = 0.01
    with pytest.raises(BackendUnavailable, match="after 3 attempts"):
        llm.generate(["hi"])
    assert len(_Flaky.seen) == 3


def test_server_ignoring_n_gets_follow_up_requests(flaky_server):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    _Flaky.fail_first = 0
    llm = OpenAICompatibleLLM(f"http://127.0.0.1:{flaky_server.server_port}/v1", "m")
    (outs,) = llm.generate(["hi"], SamplingParams(temperature=1.0, seed=10), n=3)
    assert [o.text for o in outs] == ["ok 1", "ok 2", "ok 3"]
    assert [b["n"] for b in _Flaky.seen] == [3, 2, 1]
    assert [b["seed"] for b in _Flaky.seen] == [10, 11, 12]  # each request draws new samples


def test_a_server_that_refuses_grammars_is_asked_again_without_one(flaky_server):
    pytest.importorskip("httpx", reason="needs the [openai] extra")
    _Flaky.refuse_grammar = True
    llm = OpenAICompatibleLLM(f"http://127.0.0.1:{flaky_server.server_port}/v1", "m")
    (first,) = llm.generate(["hi"], SamplingParams(grammar='root ::= "Follow up: " [a-z]+'))
    (second,) = llm.generate(["again"], SamplingParams(grammar='root ::= "x"'))
    assert [first[0].text, second[0].text] == ["ok 2", "ok 3"]
    assert ["grammar" in b for b in _Flaky.seen] == [True, False, False]
