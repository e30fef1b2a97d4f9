"""Property-based fuzz of every HTTP endpoint, generated from the service's own OpenAPI schema by
schemathesis: requests the schema allows and requests that break it, over real HTTP to a live uvicorn with
scripted models. Target: no 5xx and no traceback, over at least 500 requests, in well under two minutes.

The chat and upload endpoints are also fuzzed with what a schema cannot say: JSON nested thousands deep inside
an otherwise generated request, and file names built to escape their folder or trip the file system."""

from __future__ import annotations

import json
import logging
from collections import Counter

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="needs the [dev] extra")
httpx = pytest.importorskip("httpx", reason="needs the [serve] extra")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402

from ragfunnel.bounded import MAX_JSON_DEPTH  # noqa: E402
from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.app import Settings, create_app  # noqa: E402
from ragfunnel.serve.openai_compat import CHAT_PATH  # noqa: E402
from tests.helpers.serve import LiveServer, reply  # noqa: E402

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
    from ragfunnel.serve.options import client_model

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

    properties = client_model(method).model_json_schema()["properties"]
    return st.fixed_dictionaries({}, optional={name: value(field) for name, field in properties.items()})


def test_every_context_method_with_any_valid_options_answers_or_refuses_in_one_line(tmp_path, monkeypatch, caplog):
    from ragfunnel.methods import CONTEXT_METHODS
    from tests.helpers.serve import TEXT

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


def deep_json() -> st.SearchStrategy[bytes]:
    """JSON text nested from just past the service's limit to thousands of levels, lists and objects mixed."""
    def nested(depth: int, pattern: int) -> bytes:
        lists = [pattern >> (level % 8) & 1 for level in range(depth)]
        return (b"".join(b"[" if is_list else b'{"k": ' for is_list in lists) + b"0"
                + b"".join(b"]" if is_list else b"}" for is_list in reversed(lists)))

    return st.builds(nested, st.integers(MAX_JSON_DEPTH + 1, 5000), st.integers(0, 255))


HOSTILE_PARTS = [b"..", b".", b"/", b"\\", b"\x00", b"\x1b", b"\x7f", b"\r", b"\n", b'"', b"\xff", b"\xed\xa0\x80",
                 "\u202e".encode(), b"x" * 300, "é".encode() * 150, b".pdf", b".md", b".txt", b"%00", b" ", b"con"]


def hostile_filenames() -> st.SearchStrategy[bytes]:
    """File names as a multipart header may carry them: traversal, NUL and control bytes, separators, bytes that
    are not UTF-8 or encode a lone surrogate, names past 255 bytes; any bytes at all."""
    return st.one_of(st.lists(st.sampled_from(HOSTILE_PARTS), max_size=8).map(b"".join), st.binary(max_size=300),
                     st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")))


def with_deep_field(body: object, field: str, nested: bytes) -> bytes:
    """A generated JSON body whose ``field`` holds ``nested``."""
    fields = body if isinstance(body, dict) else {}
    return json.dumps({**fields, field: "__nested__"}).encode().replace(b'"__nested__"', nested)


def multipart(files: list[tuple[bytes, bytes]], fields: dict[str, str]) -> bytes:
    """A multipart body holding each (file name, data) under its name exactly as given (httpx would escape it)."""
    parts = [b'Content-Disposition: form-data; name="file"; filename="' + name + b'"\r\n\r\n' + data
             for name, data in files]
    parts += [f'Content-Disposition: form-data; name="{key}"\r\n\r\n{value}'.encode("utf-8", "surrogatepass")
              for key, value in fields.items()]
    return b"".join(b"--B0UNDARY\r\n" + part + b"\r\n" for part in parts) + b"--B0UNDARY--\r\n"


def test_deep_nesting_and_hostile_file_names_never_get_a_5xx(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path))
    caplog.set_level(logging.WARNING)
    statuses: Counter[int] = Counter()
    app = create_app(Settings(light="fake:light", strong="fake:strong", prefill=False, queue=64))
    fuzz = settings(max_examples=40, deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))
    with registered("fake:light", FakeLLM(reply, name="fake-light")), \
            registered("fake:strong", FakeLLM(reply, name="fake-strong")), LiveServer(app) as url:
        schema = schemathesis.openapi.from_dict(httpx.get(f"{url}/openapi.json").json())
        operations = {(op.method.upper(), op.path): op for op in (r.ok() for r in schema.get_all_operations())}
        chat, documents = operations["POST", CHAT_PATH], operations["POST", "/v1/documents"]

        def refused_as_too_deep(path: str, body: bytes) -> None:
            r = httpx.post(f"{url}{path}", content=body, headers={"Content-Type": "application/json"}, timeout=60)
            statuses[r.status_code] += 1
            detail = r.json()["error"]["message"] if path == CHAT_PATH else r.json()["detail"]
            assert r.status_code == 400 and "nests too deeply" in detail, (path, r.status_code, r.text[:300])

        @given(case=chat.as_strategy(), nested=deep_json(), field=st.sampled_from(["options", "metadata", "messages"]))
        @fuzz
        def deep_chat(case, nested, field):
            refused_as_too_deep(CHAT_PATH, with_deep_field(case.body, field, nested))

        @given(case=documents.as_strategy(media_type="application/json"), nested=deep_json(),
               field=st.sampled_from(["name", "text", "task"]))
        @fuzz
        def deep_document(case, nested, field):
            refused_as_too_deep("/v1/documents", with_deep_field(case.body, field, nested))

        @given(case=documents.as_strategy(media_type="multipart/form-data"),
               names=st.lists(hostile_filenames(), min_size=1, max_size=3))
        @fuzz
        def upload(case, names):
            body = case.body if isinstance(case.body, dict) else {}
            contents = [getattr(f, "data", f) for f in body.get("file", []) if isinstance(getattr(f, "data", f), bytes)]
            contents = contents or [b"Gulls nest on the rock."]
            fields = {k: v for k, v in body.items() if k in ("name", "task") and isinstance(v, str)}
            files = [(name, contents[i % len(contents)]) for i, name in enumerate(names)]
            r = httpx.post(f"{url}/v1/documents", content=multipart(files, fields), timeout=60,
                           headers={"Content-Type": "multipart/form-data; boundary=B0UNDARY"})
            statuses[r.status_code] += 1
            assert r.status_code < 500, (names, r.status_code, r.text[:300])
            if r.status_code == 201:
                for file in r.json()["files"]:
                    shown = file["name"]
                    assert 0 < len(shown) <= 255 and shown not in (".", ".."), shown
                    assert not any(c in shown for c in "/\\\x00\r\n"), shown

        deep_chat()
        deep_document()
        upload()
    print(json.dumps({"requests": sum(statuses.values()), "statuses": dict(sorted(statuses.items()))}))
    assert statuses[400] >= 80 and statuses[201] >= 1
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
