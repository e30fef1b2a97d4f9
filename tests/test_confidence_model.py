"""The costly confidence signals on a real bundled model: token log-probabilities read back, the model's
own yes/no, and answers sampled again from the prompt it holds (marker: model)."""

from __future__ import annotations

import math

import pytest

from ragfunnel.confidence import measuring_every_signal
from ragfunnel.llm import resolve
from ragfunnel.llm.llamacpp_batch import LOGPROB_TOKENS
from ragfunnel.methods import make_method
from ragfunnel.types import SamplingParams

pytestmark = pytest.mark.model

TEXT = ("The lighthouse on Gull Rock was built in 1871. Its first keeper was Martha Quill, who kept diaries "
        "of the seabird colonies through forty winters. ") * 20


@pytest.fixture(scope="module")
def tiny():
    llm = resolve("bundled:smollm2-135m")
    llm.call_cache = None  # every call runs the model
    return llm


def test_a_greedy_answer_carries_each_tokens_log_probability(tiny):
    out = tiny.generate(["Who was the first keeper? " + TEXT[:300]], SamplingParams(max_tokens=12))[0][0]
    n = len(tiny._llama.tokenize(out.text.encode(), add_bos=False, special=False))
    assert len(out.logprobs) == min(n, LOGPROB_TOKENS) and all(v <= 0 and math.isfinite(v) for v in out.logprobs)
    again = tiny.generate(["Who was the first keeper? " + TEXT[:300]], SamplingParams(max_tokens=12))[0][0]
    assert again.text == out.text and again.logprobs == pytest.approx(out.logprobs, abs=1e-3)  # read back alike
    sampled = tiny.generate(["Name a colour."], SamplingParams(temperature=1.0, max_tokens=4), n=2)[0]
    assert all(c.logprobs == () for c in sampled)  # drafts carry none: nothing reads them


def test_the_judge_reads_only_the_check_after_the_answer(tiny):
    prompt = "Read this and answer: who kept the lighthouse?\n" + TEXT
    answer = tiny.generate([prompt], SamplingParams(max_tokens=8))[0][0].text
    held = tiny._llama.n_tokens
    p = tiny.yes_probability(prompt, answer, "Is that answer correct? Reply Yes or No.")
    assert 0 <= p <= 1
    assert tiny._llama.n_tokens - held < 40  # the prompt and the answer were not read again


def test_op_on_a_real_model_reads_every_signal_when_measuring(tiny):
    with measuring_every_signal():
        p = make_method("op", strong=tiny, budget=300, chunk_words=60).run("Who was the first keeper?", TEXT)
    assert {"answer_logprob_mean", "support", "sample_agreement", "judge_yes"} <= set(p.signals)
    assert 0 <= p.signals["sample_agreement"] <= 1
    stage = p.trace.stage("confidence")
    assert stage.seconds < p.trace.stage("generate").seconds  # the signals cost less than the answer
