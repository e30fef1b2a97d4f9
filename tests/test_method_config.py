"""The methods' configurations: each option's type, bounds and choices checked once, where it is declared."""

import dataclasses

import pytest

from ragfunnel.declared import options_of_config
from ragfunnel.errors import ConfigError
from ragfunnel.methods import REGISTRY, config_of, make_method
from ragfunnel.methods.config import (
    AnswerConfig,
    AutoConfig,
    CorpusFBConfig,
    FBConfig,
    ForwardOnlyConfig,
    FunnelConfig,
    IterDragConfig,
    RetrievalConfig,
)


@pytest.mark.parametrize("options, message", [
    ({"budget": 0}, "budget must be between 1 and 1,000,000, got 0"),
    ({"budget": 1.5}, "budget must be int, got 1.5"),
    ({"samples": True}, "samples must be int, got True"),
    ({"top_p": 0}, "top_p must be above 0 and at most 1, got 0.0"),
    ({"temperature": "hot"}, "temperature must be float, got 'hot'"),
    ({"draft_from": "disk"}, "draft_from must be one of warm, selection, document, got 'disk'"),
    ({"fusion": "mean"}, "fusion must be one of normalized, raw, got 'mean'"),
    ({"stage1_budget": 1000, "budget": 1500}, "stage1_budget 1000 is smaller than budget 1500"),
    ({"eta_forward": 0.0, "eta_backward": 0}, "eta_forward and eta_backward cannot both be 0"),
    ({"task": "poem"}, "unknown task 'poem'"),
    ({"max_tokens": 5000}, "max_tokens must be between 1 and 4,096, got 5000"),
])
def test_a_bad_value_names_its_field(options, message):
    with pytest.raises(ConfigError) as refused:
        FBConfig(**options)
    assert message in str(refused.value)


def test_a_whole_number_is_a_float_where_a_float_goes_and_none_is_the_computed_default():
    config = FBConfig(temperature=1, stage1_budget=None)
    assert config.temperature == 1.0 and type(config.temperature) is float and config.stage1_budget is None


def test_configurations_are_frozen_and_compose():
    with pytest.raises(dataclasses.FrozenInstanceError):
        FBConfig().budget = 10  # type: ignore[misc]
    assert issubclass(FBConfig, RetrievalConfig) and issubclass(RetrievalConfig, AnswerConfig)
    auto = AutoConfig(budget=900, samples=3, prefer="quality")
    assert auto.narrowed(FBConfig) == FBConfig(budget=900, samples=3)  # auto's FB-RAG rung shares its options
    assert auto.narrowed(AnswerConfig) == AnswerConfig()


def test_a_changed_default_is_the_same_option():
    """fb-f starts from other weights, FB over an index keeps more documents, IterDRAG writes short steps; each
    is the one option (one help, one bound) with another default."""
    def spec(config, name):
        return next(o.spec for o in options_of_config(config) if o.name == name)
    assert ForwardOnlyConfig().eta_forward == 1.0 and ForwardOnlyConfig().eta_backward == 0.0
    assert spec(ForwardOnlyConfig, "eta_forward") is spec(FBConfig, "eta_forward")
    assert CorpusFBConfig().top_documents == 20 and FunnelConfig().top_documents == 8
    assert spec(CorpusFBConfig, "top_documents") is spec(FunnelConfig, "top_documents")
    assert IterDragConfig().max_tokens == 64 and AnswerConfig().max_tokens is None


def test_models_files_and_urls_are_operator_only_and_nothing_else_is():
    operator = {o.name for entry in REGISTRY.values() for o in options_of_config(entry.config)
                if o.spec.operator_only}
    assert operator == {"pre_ranker", "post_ranker", "demonstrations"}


def test_make_method_builds_the_registered_configuration():
    fb_f = make_method("fb-f", samples=2)
    assert type(fb_f.config) is ForwardOnlyConfig and fb_f.config.samples == 2 and fb_f.name == "fb-f"
    assert config_of("fb", over_index=True) is CorpusFBConfig
    with pytest.raises(ConfigError, match="method lc does not take budget; it takes task, max_tokens"):
        make_method("lc", budget=10)


def test_a_computed_default_is_worked_out_by_its_rule_and_said_by_it():
    from ragfunnel.methods.config import FBConfig, stage1_tokens
    from ragfunnel.prompts import answer_tokens

    c = FBConfig(budget=2000).resolved()
    assert (c.max_tokens, c.stage1_budget, c.sample_max_tokens) == (answer_tokens("qa"), 4000,
                                                                     answer_tokens("qa") + 128)
    assert FBConfig(task="summary").resolved().sample_max_tokens == 128  # a summary's drafts keep no rationale room
    assert FBConfig(stage1_budget=5000).resolved().stage1_budget == 5000  # one the caller set is kept
    spec = next(o.spec for o in options_of_config(FBConfig) if o.name == "stage1_budget")
    assert spec.computed is stage1_tokens and spec.default_text == "max(3000, twice the budget)"
    assert make_method("fb", budget=500).config.stage1_budget == 3000  # the method reads its resolved configuration
