"""The service with scripted models: a document, a reply, a test client, a live uvicorn, a slow model."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
pytest.importorskip("httpx", reason="needs the [serve] extra")
import uvicorn  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from ragfunnel.llm import Capabilities, FakeLLM, current_cancellation  # noqa: E402
from ragfunnel.llm.base import text_sink  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.app import Settings, create_app  # noqa: E402
from tests.helpers.network import free_port  # noqa: E402

TEXT = " ".join(f"filler{i}" for i in range(700)) + " The ferry to Gull Rock leaves at nine. " + \
    " ".join(f"more{i}" for i in range(700))


def local(app) -> TestClient:
    """A test client that talks to the app as a local browser or SDK does (Host 127.0.0.1:8000)."""
    return TestClient(app, base_url="http://127.0.0.1:8000")


def reply(prompt: str, i: int) -> str:
    if "Rationale:" in prompt:
        return "Rationale: the ferry to Gull Rock leaves at nine.\nAnswer: nine"
    return "nine"


@contextmanager
def served(*, light=reply, **settings):
    """A test client of the app over scripted models, with ``settings`` changed from the defaults."""
    settings = {"light": "fake:light", "strong": "fake:strong", "prefill": False, **settings}
    with registered("fake:light", FakeLLM(light, name="fake-light")), \
            registered("fake:strong", FakeLLM(reply, name="fake-strong")), local(create_app(Settings(**settings))) as c:
        yield c


class LiveServer:
    """The app on a real uvicorn in this process (a thread), for what TestClient cannot do: hang up."""

    def __init__(self, app):
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


class SlowModel(FakeLLM):
    """A model that writes a token every 50 ms for ``seconds`` and looks at its call's cancellation after each,
    as real backends do; its text streams where its caller says."""

    capabilities = Capabilities(streams_text=True)


def slow_model(seconds: float, calls: list) -> FakeLLM:
    """A :class:`SlowModel` that notes in ``calls`` when each of its answers starts and ends."""
    model = SlowModel(lambda prompt, i: write(), name="slow")

    def write() -> str:
        calls.append(time.monotonic())
        try:
            for _ in range(int(seconds / 0.05)):
                time.sleep(0.05)
                cancellation = current_cancellation()
                if cancellation is not None:
                    cancellation.check()  # raises Cancelled once nobody wants the answer
                sink = text_sink(model)
                if sink is not None:
                    sink("tok ")
        finally:
            calls.append(time.monotonic())
        return "nine"

    return model
