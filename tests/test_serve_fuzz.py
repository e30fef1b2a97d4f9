"""Property-based fuzz of every HTTP endpoint, generated from the service's own OpenAPI schema by
schemathesis: requests the schema allows and requests that break it, over real HTTP to a live uvicorn with
scripted models. Target: no 5xx and no traceback, over at least 500 requests, in well under two minutes."""

from __future__ import annotations

import json
import logging
from collections import Counter

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="needs the [dev] extra")
httpx = pytest.importorskip("httpx", reason="needs the [serve] extra")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402

from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.app import Settings, create_app  # noqa: E402
from tests.test_serve_api import reply  # noqa: E402
from tests.test_serve_hostile import LiveServer  # noqa: E402

EXAMPLES = 100  # per operation and mode (8 operations x 2 modes), less what a small input space runs out of
MINIMUM_REQUESTS = 500


def test_no_generated_request_gets_a_5xx_or_a_traceback(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path))  # auto measures the scripted models' speed here
    caplog.set_level(logging.WARNING)
    statuses: Counter[int] = Counter()
    server_errors: list[str] = []
    app = create_app(Settings(light="fake:light", strong="fake:strong", prefill=True, queue=64))
    with registered("fake:light", FakeLLM(reply, name="fake-light")), \
            registered("fake:strong", FakeLLM(reply, name="fake-strong")), LiveServer(app) as url:
        schema = schemathesis.openapi.from_dict(httpx.get(f"{url}/openapi.json").json())
        operations = [result.ok() for result in schema.get_all_operations()]
        for operation in operations:
            for mode in schemathesis.GenerationMode:
                @given(case=operation.as_strategy(generation_mode=mode))
                @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
                          suppress_health_check=list(HealthCheck))
                def call(case):
                    response = case.call(base_url=url, timeout=60)
                    statuses[response.status_code] += 1
                    if response.status_code >= 500:
                        server_errors.append(f"{case.method} {case.formatted_path} {case.body!r:.200} -> "
                                             f"{response.status_code} {response.text[:200]}")

                try:
                    call()
                except Unsatisfiable:  # nothing in this operation to break (GET /healthz has no input)
                    pass
    total = sum(statuses.values())
    print(json.dumps({"requests": total, "operations": len(operations), "statuses": dict(sorted(statuses.items()))}))
    assert not server_errors, server_errors[:5]
    assert total >= MINIMUM_REQUESTS, dict(statuses)
    assert len(operations) >= 8
    tracebacks = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not tracebacks, [r.getMessage() for r in tracebacks[:3]]


def options_strategy(method: str):
    """Any options a client may set for ``method``: every subset of its typed fields, values within their bounds."""
    from hypothesis import strategies as st

    from ragfunnel.serve.options import CLIENT_OPTIONS

    def value(field: dict):
        if "anyOf" in field:
            return st.one_of(*(value(choice) for choice in field["anyOf"]))
        if "enum" in field:
            return st.sampled_from(field["enum"])
        low, high = field.get("minimum", field.get("exclusiveMinimum")), field.get("maximum")
        if field.get("type") == "integer":
            return st.integers(low, high)
        if field.get("type") == "number":
            return st.floats(low, high, allow_nan=False, exclude_min="exclusiveMinimum" in field)
        if field.get("type") == "null":
            return st.none()
        if field.get("type") == "boolean":
            return st.booleans()
        raise AssertionError(f"no strategy for {field}")

    properties = CLIENT_OPTIONS[method].model_json_schema()["properties"]
    return st.fixed_dictionaries({}, optional={name: value(field) for name, field in properties.items()})


def test_every_context_method_with_any_valid_options_answers_or_refuses_in_one_line(tmp_path, monkeypatch, caplog):
    from hypothesis import strategies as st

    from ragfunnel.methods import CONTEXT_METHODS
    from tests.test_serve_api import TEXT

    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path))
    caplog.set_level(logging.WARNING)
    statuses: Counter[int] = Counter()
    texts = st.sampled_from([TEXT, "The ferry leaves at nine.", "Zeile eins\u2028zwei — ünïcödé ✓ " * 40])
    app = create_app(Settings(light="fake:light", strong="fake:strong", prefill=False))
    with registered("fake:light", FakeLLM(reply, name="fake-light")), \
            registered("fake:strong", FakeLLM(reply, name="fake-strong")), LiveServer(app) as url:
        for method in CONTEXT_METHODS:
            @given(method=st.just(method), options=options_strategy(method), text=texts,
                   question=st.text(min_size=1, max_size=200))
            @settings(max_examples=30, deadline=None, database=None, phases=[Phase.generate],
                      suppress_health_check=list(HealthCheck))
            def ask(method, options, text, question):
                r = httpx.post(f"{url}/v1/answer", timeout=60,
                               json={"question": question, "text": text, "method": method, "options": options})
                statuses[r.status_code] += 1
                assert r.status_code in (200, 422), (method, options, r.status_code, r.text[:300])
                if r.status_code == 422:
                    assert "\n" not in r.json()["detail"]

            ask()
    print(json.dumps({"requests": sum(statuses.values()), "statuses": dict(sorted(statuses.items()))}))
    assert statuses[200] >= 50
    assert not [r for r in caplog.records if r.exc_info]
