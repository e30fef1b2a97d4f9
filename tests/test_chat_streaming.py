"""Token streaming in ``serve``: a streamed chat completion, read with the official ``openai`` client from a live
uvicorn server, carries the answering model's tokens as it writes them and ends with the clean answer; the
ragfunnel SSE API streams the same tokens. Scripted models: the strong one writes its reply a piece at a time
through the job's text channel, with a pause before each piece, and notes when it wrote each."""

from __future__ import annotations

import json
import threading
import time

import pytest

openai = pytest.importorskip("openai", reason="needs the openai client (the [dev] extra)")
uvicorn = pytest.importorskip("uvicorn", reason="needs the [serve] extra")

from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.base import Capabilities, text_sink  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.app import Settings, create_app  # noqa: E402
from tests.helpers.network import free_port  # noqa: E402
from tests.helpers.serve import TEXT, local, reply  # noqa: E402

PAUSE = 0.15  # seconds before each piece the strong model writes
# The strong model's reply to each question, in the pieces it writes them.
PIECES = {"When does the ferry leave?": ["The ferry", " leaves", " at", " nine", "."],
          "At what hour does the ferry sail?": ["Answer:", " nine"],
          "Which hour does the boat go?": ["nine", " o'clock"]}


class WritingModel(FakeLLM):
    """A strong model that writes its reply a piece at a time where its caller's channel says."""

    capabilities = Capabilities(streams_text=True)


def writing_model(written: list[float]) -> WritingModel:
    """A :class:`WritingModel` that notes in ``written`` the time it wrote each piece."""

    def write(prompt: str, i: int) -> str:
        pieces = next(p for question, p in PIECES.items() if question in prompt)
        for piece in pieces:
            time.sleep(PAUSE)
            written.append(time.monotonic())
            sink = text_sink(model)
            if sink is not None:
                sink(piece)
        return "".join(pieces)

    model = WritingModel(write, name="writing-strong")
    return model


@pytest.fixture(scope="module")
def served():
    """(the server's /v1 URL, the times the strong model wrote its pieces)."""
    written: list[float] = []
    port = free_port()
    settings = Settings(light="fake:light", strong="fake:writing", prefill=False)
    with registered("fake:light", FakeLLM(reply, name="fake-light")), \
            registered("fake:writing", writing_model(written)):
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="error"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1", written
        server.should_exit = True
        thread.join(10)


def streamed_chat(url: str, question: str) -> list[tuple[float, object]]:
    """The chunks of a streamed ``ragfunnel-op`` completion, each with the time it arrived."""
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)
    stream = client.chat.completions.create(
        model="ragfunnel-op", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": TEXT}, {"role": "user", "content": question}])
    return [(time.monotonic(), chunk) for chunk in stream]


def test_a_streamed_completion_sends_the_tokens_as_they_are_written(served):
    url, written = served
    written.clear()
    timed = streamed_chat(url, "When does the ferry leave?")
    chunks = [c for _, c in timed]
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [(t, c.choices[0].delta.content) for t, c in timed if c.choices and c.choices[0].delta.content]
    assert [text for _, text in content] == PIECES["When does the ferry leave?"]
    # the first piece reached the client before the model wrote its last, so well before the job's last stage
    assert content[0][0] < written[-1] - PAUSE
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    extra = final.model_extra["ragfunnel"]
    assert extra["answer"] == "The ferry leaves at nine." and extra["streamed_text_differs"] is False
    assert extra["method"] == "op" and extra["confidence"] is not None and extra["citations"]
    assert [s["name"] for s in extra["trace"]["stages"]][-1] == "confidence"
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens > 0
    assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + chunks[-1].usage.completion_tokens


def test_the_last_chunk_says_when_cleaning_changed_the_streamed_text(served):
    url, _ = served
    chunks = [c for _, c in streamed_chat(url, "At what hour does the ferry sail?")]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "Answer: nine"  # what the model wrote
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    assert final.model_extra["ragfunnel"]["answer"] == "nine"  # what the method answered
    assert final.model_extra["ragfunnel"]["streamed_text_differs"] is True


def test_stage_progress_comes_before_the_tokens_as_sse_comments(served):
    import httpx

    url, _ = served
    body = {"model": "ragfunnel-op", "stream": True, "messages": [
        {"role": "system", "content": TEXT}, {"role": "user", "content": "Which hour does the boat go?"}]}
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=60) as r:
        lines = [line for line in r.iter_lines() if line]
    first_token = next(i for i, line in enumerate(lines) if line.startswith("data: {") and
                       json.loads(line[6:])["choices"][0]["delta"].get("content"))
    assert any(line.startswith(": stage retrieve") for line in lines[:first_token])
    assert ": stage generate started" in lines[:first_token]  # a long prefill shows before its first token
    assert lines[-1] == "data: [DONE]"


def test_the_answer_api_streams_the_same_tokens():
    settings = Settings(light="fake:light-api", strong="fake:writing-api", prefill=False)
    with registered("fake:light-api", FakeLLM(reply, name="fake-light")), \
            registered("fake:writing-api", writing_model([])), local(create_app(settings)) as client, \
            client.stream("POST", "/v1/answer", json={"question": "When does the ferry leave?", "text": TEXT,
                                                      "method": "op", "stream": True}) as r:
        lines = list(r.iter_lines())
    events = [(line[len("event: "):], json.loads(data[len("data: "):]))
              for line, data in zip(lines, lines[1:], strict=False) if line.startswith("event: ")]
    kinds = [kind for kind, _ in events]
    assert "".join(d["text"] for kind, d in events if kind == "token") == "The ferry leaves at nine."
    assert kinds.index("token") < kinds.index("result") and kinds[-1] == "result"
    generate = next(i for i, (kind, d) in enumerate(events) if kind == "stage" and d["name"] == "generate")
    assert max(i for i, kind in enumerate(kinds) if kind == "token") < generate
