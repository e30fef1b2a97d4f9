"""One LLM protocol: what a backend can do is declared in its capabilities (and checked when its class is
defined), every member has a safe default, and what belongs to one request (its cancellation, where its
text streams) travels with the call, never on the shared model object."""

from __future__ import annotations

import threading
import time

import pytest

from ragfunnel.confidence.assess import judge
from ragfunnel.errors import ConfigError
from ragfunnel.llm import (
    LLM,
    Cancellation,
    Cancelled,
    Capabilities,
    FakeLLM,
    cancelled_by,
    current_cancellation,
    registry,
)
from ragfunnel.llm import streaming as streaming_text
from ragfunnel.llm.base import text_sink
from ragfunnel.llm.llamacpp import LlamaCppLLM
from ragfunnel.llm.openai import OpenAICompatibleLLM
from ragfunnel.llm.registry import check_backends, registered, reset_loaded
from ragfunnel.serve.jobs import JobQueue
from ragfunnel.types import Completion, SamplingParams


class Streaming(FakeLLM):
    """A scripted model that streams each one-sample reply word by word, as llama.cpp streams tokens."""

    capabilities = Capabilities(streams_text=True)

    def _complete(self, prompt: str, params: SamplingParams, n: int) -> list[Completion]:
        outs = super()._complete(prompt, params, n)
        sink = text_sink(self)
        if n == 1 and sink is not None:
            for word in outs[0].text.split():
                sink(word + " ")
        return outs


def test_each_backend_declares_what_it_can_do():
    llama, server, fake = LlamaCppLLM.capabilities, OpenAICompatibleLLM.capabilities, FakeLLM.capabilities
    assert llama == Capabilities(prefix_state=True, reuses_prompt=True, yes_probability=True, streams_text=True,
                                 warm_up=True, reset=True)
    assert server == Capabilities(yes_probability=True, warm_up=True, check_reachable=True)
    assert fake == Capabilities()
    assert isinstance(FakeLLM(lambda p, i: "x"), LLM) and isinstance(OpenAICompatibleLLM("http://h/v1", "m"), LLM)


def test_a_backend_whose_declaration_does_not_match_its_members_is_refused_when_defined():
    with pytest.raises(TypeError, match="Judge defines yes_probability.. but its capabilities do not declare"):
        class Judge(FakeLLM):
            def yes_probability(self, prompt: str, answer: str, check: str) -> float | None:
                return 0.5

    with pytest.raises(TypeError, match="Boaster declares reset=True but defines no reset"):
        class Boaster(FakeLLM):
            capabilities = Capabilities(reset=True)


def test_members_a_backend_lacks_have_safe_defaults():
    llm = FakeLLM(lambda p, i: "x", name="plain")
    assert llm.prefix_state("any document") == "none" and llm.last_prefix == {} and llm.disk_prefixes is None
    assert llm.warm_up() is None and llm.reset() is None and llm.check_reachable() is None
    with pytest.raises(ConfigError, match="plain cannot read the probability.*capabilities.yes_probability"):
        llm.yes_probability("q", "a", "right?")
    assert judge(llm, "q", "a") is None  # a caller tests the capability before asking


def test_the_registry_calls_members_without_probing_and_gives_prefix_stores_only_where_declared(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(registry, "_loaded", {})
    monkeypatch.setattr(registry, "_disk_caches", False)
    resets = []

    class Resetting(FakeLLM):
        capabilities = Capabilities(reset=True)

        def reset(self) -> None:
            resets.append(self.name)

    with registered("fake:r", Resetting(lambda p, i: "x", name="r")) as llm:
        check_backends(["fake:r"])  # nothing to reach: the default passes
        monkeypatch.setattr(registry, "_disk_caches", True)
        registry._attach_caches(llm)  # what resolving a spec, or set_disk_caches, does to each model
        assert llm.call_cache is not None and llm.disk_prefixes is None
        reset_loaded()
    assert resets == ["r"]


def test_a_call_runs_under_the_cancellation_of_its_block_and_a_cancelled_one_never_starts():
    llm = FakeLLM(lambda p, i: "x")
    token = Cancellation("the job")
    assert current_cancellation() is None
    with cancelled_by(token):
        assert current_cancellation() is token
        assert llm.generate(["q"])[0][0].text == "x"
        token.cancel("the client went away")
        with pytest.raises(Cancelled, match="the job was cancelled: the client went away"):
            llm.generate(["q"])
    assert current_cancellation() is None and len(llm.calls) == 1
    assert llm.generate(["q"])[0][0].text == "x"  # outside the block nothing ends a call


def test_a_token_given_to_the_call_wins_over_the_block():
    llm = FakeLLM(lambda p, i: "x")
    cancelled = Cancellation("the job")
    cancelled.cancel("gone")
    with cancelled_by(cancelled):
        assert llm.generate(["q"], cancel=Cancellation("a call of its own"))[0][0].text == "x"


def test_a_cancellation_is_seen_from_another_thread_between_samples():
    llm = FakeLLM(lambda p, i: time.sleep(0.02) or "x")
    token = Cancellation("drafts")
    threading.Timer(0.1, token.cancel, args=("enough",)).start()
    started = time.monotonic()
    with pytest.raises(Cancelled, match="enough"):
        llm.generate(["q"], n=500, cancel=token)
    assert time.monotonic() - started < 2


def test_text_streams_only_from_the_model_its_channel_names():
    light, strong = Streaming(lambda p, i: "a draft", name="light"), Streaming(lambda p, i: "the answer", name="strong")
    heard: list[str] = []
    with streaming_text(strong, heard.append):
        light.generate(["q"])
        strong.generate(["q"])
        with streaming_text(strong, None):  # an inner block may silence it (speed calibration does)
            strong.generate(["q2"])
    strong.generate(["q3"])
    assert "".join(heard) == "the answer "
    own: list[str] = []
    light.generate(["q4"], on_text=own.append)
    assert own == ["a ", "draft "] and "".join(heard) == "the answer "


def test_a_job_streams_its_answering_models_text_and_leaves_the_shared_models_untouched():
    light, strong = Streaming(lambda p, i: "a draft", name="light"), Streaming(lambda p, i: "the answer", name="strong")
    before = {model.name: dict(vars(model)) for model in (light, strong)}
    tokens: list[str] = []
    seen: list[Cancellation | None] = []
    jobs = JobQueue(capacity=2, streaming=strong)
    try:
        def work(job):
            seen.append(current_cancellation())
            light.generate(["q"])
            return strong.generate(["q"])[0][0].text

        job = jobs.submit(work, label="answer", on_text=tokens.append)
        assert job.future.result(timeout=5) == "the answer"
    finally:
        jobs.close()
    assert tokens == ["the ", "answer "] and seen == [job.cancellation]
    after = {model.name: {k: v for k, v in vars(model).items() if k not in ("calls", "grammars", "_token_cache")}
             for model in (light, strong)}
    assert after == {name: {k: v for k, v in attrs.items() if k not in ("calls", "grammars", "_token_cache")}
                     for name, attrs in before.items()}
