"""``POST /v1/chat/completions`` driven by the official ``openai`` client against a live uvicorn server
(scripted models: no model loads): plain, streamed, errors in OpenAI's shape, and bad requests."""

from __future__ import annotations

import threading
import time

import pytest

from ragfunnel.confidence import current_calibration

openai = pytest.importorskip("openai", reason="needs the openai client (the [dev] extra)")
uvicorn = pytest.importorskip("uvicorn", reason="needs the [serve] extra")

from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.app import Settings, create_app  # noqa: E402
from tests.helpers.network import free_port  # noqa: E402
from tests.helpers.serve import TEXT, reply  # noqa: E402

TOKEN = "s3cret"


@pytest.fixture(scope="module")
def url():
    port = free_port()
    settings = Settings(light="fake:light", strong="fake:strong", prefill=False, token=TOKEN)
    with registered("fake:light", FakeLLM(reply, name="fake-light")), \
            registered("fake:strong", FakeLLM(reply, name="fake-strong")):
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="error"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
        server.should_exit = True
        thread.join(10)


def client(url, token=TOKEN):
    return openai.OpenAI(base_url=url, api_key=token, max_retries=0, timeout=60)


def test_models_lists_the_methods(url):
    ids = [m.id for m in client(url).models.list()]
    assert {"ragfunnel-auto", "ragfunnel-fb", "ragfunnel-op", "ragfunnel-lc", "ragfunnel-funnel"} <= set(ids)


def test_a_plain_completion_answers_from_the_system_message(url):
    r = client(url).chat.completions.create(
        model="ragfunnel-op", messages=[{"role": "system", "content": TEXT},
                                        {"role": "user", "content": "When does the ferry to Gull Rock leave?"}])
    assert r.choices[0].message.content == "nine" and r.choices[0].finish_reason == "stop"
    extra = r.model_extra["ragfunnel"]
    assert extra["method"] == "op" and "The ferry to Gull Rock leaves at nine." in extra["citations"][0]["quote"]
    assert extra["supported"] == (extra["confidence"] >= current_calibration().supported_at)
    assert extra["citation_note"] is None  # a passage read states "nine"
    stages = extra["trace"]["stages"]
    assert r.usage.prompt_tokens == sum(s["input_tokens"] for s in stages) > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_a_stored_document_is_named_in_extra_body_and_streamed(url):
    import httpx

    doc = httpx.post(f"{url}/documents", json={"text": TEXT}, headers={"Authorization": f"Bearer {TOKEN}"}).json()
    stream = client(url).chat.completions.create(
        model="ragfunnel-fb", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Which rock?"}, {"role": "assistant", "content": "Gull Rock."},
                  {"role": "user", "content": "When does the ferry leave?"}],
        extra_body={"document_id": doc["id"], "options": {"budget": 400}})
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "nine"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.prompt_tokens > 0
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    assert final.model_extra["ragfunnel"]["method"] == "fb"


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"model": "gpt-4o"}, openai.NotFoundError, "unknown model 'gpt-4o'"),
    ({"model": "ragfunnel-/etc/passwd"}, openai.NotFoundError, "unknown model"),
    ({"messages": []}, openai.BadRequestError, "messages"),
    ({"messages": [{"role": "system", "content": TEXT}]}, openai.BadRequestError, "no user message"),
    ({"messages": [{"role": "user", "content": "Q?"}]}, openai.BadRequestError, "no document"),
    ({"messages": [{"role": "wizard", "content": "Q?"}]}, openai.BadRequestError, "role"),
    ({"extra_body": {"options": {"strong": "gguf:/tmp/x.gguf"}}}, openai.BadRequestError, "strong"),
    ({"extra_body": {"options": {"budget": "lots"}}}, openai.BadRequestError, "budget"),
    ({"extra_body": {"document_id": "nope"}}, openai.NotFoundError, "no document 'nope'"),
])
def test_bad_requests_get_openai_errors(url, kwargs, error, match):
    args = {"model": "ragfunnel-op", "messages": [{"role": "system", "content": TEXT},
                                                 {"role": "user", "content": "When?"}]} | kwargs
    with pytest.raises(error, match=match) as raised:
        client(url).chat.completions.create(**args)
    assert raised.value.body["message"] and raised.value.body["type"]


def test_a_missing_token_is_401_in_openais_shape(url):
    with pytest.raises(openai.AuthenticationError) as raised:
        client(url, token="wrong").chat.completions.create(
            model="ragfunnel-op", messages=[{"role": "user", "content": "Q?"}])
    assert raised.value.body["code"] == "invalid_api_key"


def test_a_chat_client_that_hangs_up_mid_stream_cancels_its_job():
    import json
    import socket

    import httpx

    from tests.helpers.serve import LiveServer, slow_model

    calls: list[float] = []
    settings = Settings(light="fake:quick", strong="fake:slow", prefill=False)
    with registered("fake:quick", FakeLLM(reply)), registered("fake:slow", slow_model(30, calls)), \
            LiveServer(create_app(settings)) as url:
        body = json.dumps({"model": "ragfunnel-lc", "stream": True, "messages": [
            {"role": "system", "content": TEXT}, {"role": "user", "content": "When?"}]}).encode()
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            received = b""
            while b"chat.completion.chunk" not in received:  # the stream began (headers come first)
                received += s.recv(4096)
            time.sleep(0.5)
        deadline = time.monotonic() + 5
        while len(calls) % 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(calls) == 2 and calls[1] - calls[0] < 5, "the generation went on after its client left"
        assert httpx.get(f"{url}/healthz").json()["pending"] == 0


def test_streamed_chunks_escape_javascript_line_separators():
    import json

    from ragfunnel.serve.openai_compat import ChunkWriter

    frame = ChunkWriter("ragfunnel-op", include_usage=False)._event({"content": "nine\u2028o'clock\u2029"})
    assert "\u2028" not in frame and "\u2029" not in frame and "\\u2028" in frame
    assert json.loads(frame.removeprefix("data: "))["choices"][0]["delta"]["content"] == "nine\u2028o'clock\u2029"
