"""The OpenAI-compatible backend against a real llama_cpp.server on 127.0.0.1 (marker: model)."""

import subprocess
import sys
import time

import pytest

from ragfunnel.llm import bundled, resolve
from ragfunnel.methods import make_method
from ragfunnel.types import SamplingParams
from tests.conftest import hotpot_context
from tests.helpers.network import free_port

httpx = pytest.importorskip("httpx", reason="needs the [openai] extra")

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    pytest.importorskip("llama_cpp.server", reason="needs the [server] extra")
    port = free_port()
    model = bundled.ensure("smollm2-135m", progress=False)
    # The server logs a lot while loading; a file (not a pipe nobody reads) keeps it from blocking.
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "tiny",
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096"],
            stdout=log, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 120
    with httpx.Client(trust_env=False) as client:
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {log_path.read_text(errors='replace')[-500:]}")
            try:
                if client.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            proc.kill()
            pytest.fail(f"llama_cpp.server did not start within 120 s: {log_path.read_text(errors='replace')[-500:]}")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_token_counts_match_the_local_tokenizer(server_url):
    remote = resolve(f"openai:{server_url}#tiny")
    local = resolve("bundled:smollm2-135m")
    text = "Forward lookup scores chunks by what the drafts say, not only by the question."
    assert remote.count_tokens(text) == local.count_tokens(text)


def test_n_samples_over_http(server_url):
    remote = resolve(f"openai:{server_url}#tiny")
    sampling = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=8)
    (outs,) = remote.generate(["Name a fruit."], sampling, n=3)
    assert len(outs) == 3 and outs[0].prompt_tokens > 0


def test_completions_mode(server_url):
    from ragfunnel.llm.openai import OpenAICompatibleLLM

    llm = OpenAICompatibleLLM(server_url, "tiny", mode="completions")
    (outs,) = llm.generate(["The capital of France is"], SamplingParams(max_tokens=4))
    assert outs[0].completion_tokens > 0


def test_fb_rag_through_the_server(server_url, hotpot_examples):
    example = hotpot_examples[1]
    spec = f"openai:{server_url}#tiny"
    p = make_method("fb-f", light=spec, strong=spec, task="multihop", budget=400, stage1_budget=800,
                    chunk_words=100, samples=3).run(example["question"], hotpot_context(example))
    assert len(p.samples) == 3 and p.trace.stage("stage3_generate").input_tokens > 0
    assert p.trace.stage("stage3_generate").detail["model"].startswith("tiny@")
