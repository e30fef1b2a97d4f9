"""Which options a request may set: every method's configuration field is the client's or the operator's, and
the configuration validates what a client sends."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic", reason="needs the [serve] extra")

from ragfunnel.declared import options_of_config  # noqa: E402
from ragfunnel.errors import ConfigError  # noqa: E402
from ragfunnel.methods import METHODS, config_of, options_of  # noqa: E402
from ragfunnel.serve.options import OPERATOR_SET, checked_options, client_model, client_options  # noqa: E402


def http_message(error: ConfigError) -> str:
    return error.spelled(lambda name: f"options.{name}")


@pytest.mark.parametrize("method", list(METHODS))
def test_every_option_of_every_method_is_the_clients_or_the_operators(method):
    """A field that names a model, file or URL is marked operator-only, and never reaches a request."""
    fields = options_of_config(config_of(method))
    operator = {o.name for o in fields if o.spec.operator_only}
    typed = set(client_options(method))
    assert typed == set(options_of(method)) - operator - {"task"}
    assert not typed & (operator | set(OPERATOR_SET))


@pytest.mark.parametrize("method", list(METHODS))
def test_client_models_forbid_anything_else(method):
    assert client_model(method).model_config["extra"] == "forbid"
    assert client_model(method).model_config["strict"] is True


@pytest.mark.parametrize("method, option, value", [
    ("funnel", "pre_ranker", "llm:openai:http://127.0.0.1:18999/v1#evil"),
    ("funnel", "post_ranker", "gguf:/etc/shadow"),
    ("fb", "strong", "gguf:/etc/passwd"),
    ("drag", "demonstrations", "/etc"),
])
def test_options_naming_models_files_or_urls_are_refused(method, option, value):
    with pytest.raises(ConfigError) as refused:
        checked_options(method, {option: value})
    assert http_message(refused.value).startswith(f"options.{option} is set by the server's operator")


@pytest.mark.parametrize("method, options, message", [
    ("fb", {"budget": "huge"}, "options.budget must be int, got 'huge'"),
    ("op", {"chunk_words": "x"}, "options.chunk_words must be int, got 'x'"),
    ("op", {"budget": None}, "options.budget must be int, got None"),
    ("fb", {"samples": "5"}, "options.samples must be int, got '5'"),
    ("auto", {"stage1_budget": [1]}, "options.stage1_budget must be int or None, got [1]"),
    ("fb", {"samples": 10_000}, "options.samples must be between 1 and 64, got 10000"),
    ("fb", {"top_p": 0}, "options.top_p must be above 0 and at most 1, got 0.0"),
    ("fb", {"draft_from": "disk"}, "options.draft_from must be one of warm, selection, document, got 'disk'"),
    ("auto", {"max_seconds": -1}, "options.max_seconds must be above 0"),
    ("op", {"budget": True}, "options.budget must be int, got True"),
    ("fb", {"stage1_budget": 100, "budget": 500}, "options.stage1_budget 100 is smaller than options.budget 500"),
    ("op", {"task": "qa"}, "request's own 'task' field"),
    ("op", {"samples": 3}, "method op does not take options.samples; it takes options.budget"),
])
def test_wrongly_typed_values_are_refused_naming_the_option(method, options, message):
    with pytest.raises(ConfigError) as refused:
        checked_options(method, options)
    assert message in http_message(refused.value)


def test_valid_options_pass_as_the_configuration_reads_them_and_nothing_else_is_added():
    assert checked_options("fb", {"budget": 700, "eta_forward": 1, "top_p": 0.5}) == \
        {"budget": 700, "eta_forward": 1.0, "top_p": 0.5}
    assert checked_options("fb", {"stage1_budget": None}) == {}  # None leaves the method's default
    assert checked_options("lc", {}) == {}
    assert "budget" in client_options("auto") and "strong" not in client_options("auto")


def test_over_an_index_fb_takes_the_funnels_options_not_the_fusion_weights():
    assert "top_documents" in client_options("fb", over_index=True)
    assert "eta_forward" not in client_options("fb", over_index=True)
    with pytest.raises(ConfigError, match="does not take"):
        checked_options("fb", {"eta_forward": 1.0}, over_index=True)
