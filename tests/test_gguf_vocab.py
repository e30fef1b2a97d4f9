"""Planning reads the vocabulary alone: prompts are counted without loading weights (marker: model)."""

from __future__ import annotations

import pytest

from ragfunnel.llm import bundled
from ragfunnel.llm.llamacpp import LlamaCppLLM
from ragfunnel.llm.speed import speed_of
from ragfunnel.methods import make_method
from ragfunnel.prompts import build_prompt, prompt_prefix

pytestmark = pytest.mark.model

TEXT = "The Kestrel Valley reservoir was finished in 1931 and holds 4.2 million cubic metres of water."


def fresh_tiny() -> LlamaCppLLM:
    spec = bundled.get("smollm2-135m")
    return LlamaCppLLM(bundled.ensure("smollm2-135m"), name="tiny", sha256=spec.sha256, n_ctx=4096)


def test_the_window_is_capped_at_the_trained_context_before_and_after_loading():
    spec = bundled.get("smollm2-135m")
    llm = LlamaCppLLM(bundled.ensure("smollm2-135m"), name="tiny", sha256=spec.sha256, n_ctx=32768)
    assert llm.context_window == 8192 and llm._llama is None  # SmolLM2-135M was trained on 8,192 tokens
    llm.warm_up()
    assert llm.context_window == 8192 and llm._llama.n_ctx() == 8192


def test_counting_tokens_and_the_window_need_no_weights_and_match_the_loaded_model():
    llm = fresh_tiny()
    prompt = build_prompt("qa", "plain", question="When was it finished?", context=TEXT)
    before = (llm.count_tokens(TEXT), llm.prompt_tokens(prompt), llm.prefix_tokens(prompt_prefix("qa", TEXT)),
              llm.context_window, llm.prefix_state(prompt_prefix("qa", TEXT)))
    assert llm._llama is None  # nothing above loaded the weights
    llm.warm_up()
    assert llm._llama is not None and llm._vocab is None  # the vocabulary alone is let go once the model loads
    llm._token_cache.clear()
    after = (llm.count_tokens(TEXT), llm.prompt_tokens(prompt), llm.prefix_tokens(prompt_prefix("qa", TEXT)),
             llm.context_window, llm.prefix_state(prompt_prefix("qa", TEXT)))
    assert before == after
    assert before[3] == 4096 and before[4] == "none"


def test_auto_plans_the_first_question_before_any_weights_load():
    speed_of(fresh_tiny())  # as setup does: the speeds are measured once, by another instance of the model
    light, strong = fresh_tiny(), fresh_tiny()
    auto = make_method("auto", light=light, strong=strong, budget=200, chunk_words=40)
    plan = auto.plan("When was the reservoir finished?", " ".join([TEXT] * 30))
    assert plan.method in {"op", "fb", "lc"} and set(plan.predicted_seconds) == {"op", "fb", "lc"}
    assert light._llama is None and strong._llama is None
