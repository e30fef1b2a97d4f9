"""Which options a request may set: every method's options are typed and bounded for clients, or the operator's."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic", reason="needs the [serve] extra")

from ragfunnel.errors import ConfigError  # noqa: E402
from ragfunnel.methods import METHODS, options_of  # noqa: E402
from ragfunnel.serve.options import CLIENT_OPTIONS, OPERATOR_ONLY, checked_options, client_options  # noqa: E402


@pytest.mark.parametrize("method", list(METHODS))
def test_every_option_of_every_method_is_the_clients_typed_or_the_operators(method):
    """A new option that names a model, file or URL cannot reach requests by accident: it must land here."""
    options = set(options_of(method))
    typed = set(CLIENT_OPTIONS[method].model_fields)
    operator = options & set(OPERATOR_ONLY)
    assert typed <= options, f"{method}'s client model has options the method does not take: {typed - options}"
    assert not typed & operator
    assert options == typed | operator | {"task"}, f"{method}: not classified: {options - typed - operator}"


@pytest.mark.parametrize("method", list(METHODS))
def test_client_models_forbid_anything_else(method):
    assert CLIENT_OPTIONS[method].model_config["extra"] == "forbid"
    assert CLIENT_OPTIONS[method].model_config["strict"] is True


@pytest.mark.parametrize("method, option, value", [
    ("funnel", "pre_ranker", "llm:openai:http://127.0.0.1:18999/v1#evil"),
    ("funnel", "post_ranker", "gguf:/etc/shadow"),
    ("fb", "strong", "gguf:/etc/passwd"),
    ("drag", "demonstrations", "/etc"),
])
def test_options_naming_models_files_or_urls_are_refused(method, option, value):
    with pytest.raises(ConfigError, match=f"option '{option}' is set by the server's operator"):
        checked_options(method, {option: value})


@pytest.mark.parametrize("method, options, message", [
    ("fb", {"budget": "huge"}, "'budget': Input should be a valid integer"),
    ("op", {"chunk_words": "x"}, "'chunk_words': Input should be a valid integer"),
    ("op", {"budget": None}, "'budget': Input should be a valid integer (got None)"),
    ("fb", {"samples": "5"}, "'samples': Input should be a valid integer (got '5')"),
    ("auto", {"stage1_budget": [1]}, "'stage1_budget'"),
    ("fb", {"samples": 10_000}, "'samples': Input should be less than or equal to 64"),
    ("fb", {"top_p": 0}, "'top_p': Input should be greater than 0"),
    ("fb", {"draft_from": "disk"}, "'draft_from': Input should be 'warm', 'selection' or 'document'"),
    ("auto", {"max_seconds": -1}, "'max_seconds'"),
    ("op", {"budget": True}, "'budget': Input should be a valid integer"),
    ("op", {"task": "qa"}, "request's own 'task' field"),
])
def test_wrongly_typed_values_are_refused_naming_the_option(method, options, message):
    with pytest.raises(ConfigError) as refused:
        checked_options(method, options)
    assert str(refused.value).startswith("option ") and message in str(refused.value)


def test_valid_options_pass_as_given_and_nothing_else_is_added():
    assert checked_options("fb", {"budget": 700, "eta_forward": 1, "top_p": 0.5}) == \
        {"budget": 700, "eta_forward": 1.0, "top_p": 0.5}
    assert checked_options("fb", {"stage1_budget": None}) == {}  # None leaves the method's default
    assert checked_options("lc", {}) == {}
    assert "budget" in client_options("auto") and "strong" not in client_options("auto")
