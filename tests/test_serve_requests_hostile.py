"""Requests built to break the service's own parsing, with scripted models (no model loads): JSON nested past
the limit on every route that takes JSON, uploads named to escape their folder or to trip the file system,
and uploads of PDF bombs. Each gets a 4xx in the service's usual error shape, never a 500; uploads are read
by the bounded job queue, and the server's memory stays flat while it refuses a bomb (measured in a subprocess).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
httpx = pytest.importorskip("httpx", reason="needs the [serve] extra")
from fastapi.exceptions import RequestValidationError  # noqa: E402

from ragfunnel.bounded import MAX_JSON_DEPTH  # noqa: E402
from ragfunnel.documents import ReadLimits  # noqa: E402
from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.app import Settings, create_app  # noqa: E402
from ragfunnel.serve.openai_compat import CHAT_PATH  # noqa: E402
from ragfunnel.serve.request_bodies import AnswerIn, json_body, shown_name  # noqa: E402
from tests.test_document_bombs import TEXT_OPS, deflated_spaces, one_page, stream  # noqa: E402
from tests.test_registry_and_http import free_port  # noqa: E402
from tests.test_serve_api import TEXT, reply  # noqa: E402
from tests.test_serve_hostile import LiveServer, served, slow_model  # noqa: E402

DEEP = b"[" * 1000 + b"]" * 1000


@pytest.fixture
def client():
    with served() as c:
        yield c


def message(response) -> str:
    """The one-line error of a response, in the service's shape: OpenAI's on its endpoint, ``detail`` elsewhere."""
    body = response.json()
    text = body["error"]["message"] if response.request.url.path == CHAT_PATH else body["detail"]
    assert isinstance(text, str) and "\n" not in text
    return text


# 1. JSON nested past the limit: refused before any parser recurses into it.

@pytest.mark.parametrize(("path", "body"), [
    (CHAT_PATH, b'{"model": "ragfunnel-op", "messages": [{"role": "user", "content": "q"}], "options": ' + DEEP + b"}"),
    ("/v1/documents", b'{"text": "Gulls nest on the rock.", "name": ' + DEEP + b"}"),
    ("/v1/answer", b'{"question": "q", "text": "t", "options": {"budget": ' + DEEP + b"}}"),
    ("/v1/search", b'{"index": "x", "question": "q", "top_k": ' + DEEP + b"}"),
])
@pytest.mark.parametrize("content_type", ["application/json", None])  # FastAPI reads an untyped body as JSON too
def test_json_nested_past_the_limit_is_400_on_every_json_route(client, path, body, content_type):
    r = client.post(path, content=body, headers={"Content-Type": content_type} if content_type else {})
    assert r.status_code == 400, r.text
    assert f"nests too deeply (over {MAX_JSON_DEPTH} levels" in message(r)


def test_the_routes_tried_are_every_route_that_takes_json(client):
    spec = client.get("/openapi.json").json()
    taking_json = {path for path, operations in spec["paths"].items() for operation in operations.values()
                   if "application/json" in operation.get("requestBody", {}).get("content", {})}
    assert taking_json == {CHAT_PATH, "/v1/documents", "/v1/answer", "/v1/search"}
    for path in taking_json:
        assert client.post(path, content=b'{"a": ' + DEEP + b"}").status_code == 400


def test_nesting_within_the_limit_reaches_the_route(client):
    nested = json.dumps({"question": "q", "text": TEXT, "options": {"budget": json.loads("[" * 60 + "]" * 60)}})
    r = client.post("/v1/answer", content=nested, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "budget" in message(r)


def test_a_body_of_unclosed_escaped_quotes_is_answered_at_once(client):
    body = b'{"a": "' + b'\\"' * 20_000 + b"[" * 70
    started = time.monotonic()
    answered = client.post("/v1/answer", content=body, headers={"Content-Type": "application/json"})
    assert answered.status_code in (400, 422)
    assert time.monotonic() - started < 1  # the nesting scan is linear: a string that never closes ends it


def test_a_body_read_by_hand_refuses_deep_nesting_itself():
    with pytest.raises(RequestValidationError) as refused:
        json_body(AnswerIn, b'{"question": "q", "options": ' + DEEP + b"}")
    assert refused.value.errors()[0]["type"] == "json_invalid"
    assert "nested deeper than 64 levels" in refused.value.errors()[0]["ctx"]["error"]


# 2. Upload file names: stored under a name made by the server, shown as the client's name, cleaned.

def multipart(filename: bytes, data: bytes = b"Gulls nest on the rock.\n") -> tuple[bytes, dict[str, str]]:
    """A multipart body of one file whose name is exactly ``filename`` (httpx would escape it)."""
    body = (b'--B0UNDARY\r\nContent-Disposition: form-data; name="file"; filename="' + filename +
            b'"\r\nContent-Type: application/octet-stream\r\n\r\n' + data + b"\r\n--B0UNDARY--\r\n")
    return body, {"Content-Type": "multipart/form-data; boundary=B0UNDARY"}


HOSTILE_NAMES = [b"..", b".", b"", b"a\x00b.txt", b"x" * 300 + b".md", "é".encode() * 200 + b".txt",
                 b"../../etc/passwd", b"..\\..\\windows\\win.ini", b"notes/", b"\xff\xfe\xfa.md",
                 b"\xed\xa0\x80.md", b"\x1b[31mred\x7f.txt", b"\xe2\x80\xaetxt.md", b"con", b"a\rb.txt", b'a"b.txt']


@pytest.mark.parametrize("filename", HOSTILE_NAMES, ids=lambda n: repr(n)[:40])
def test_a_hostile_file_name_is_stored_safely_or_refused_never_500(client, filename):
    body, headers = multipart(filename)
    r = client.post("/v1/documents", content=body, headers=headers)
    assert r.status_code in (201, 400, 422), r.text
    if r.status_code != 201:
        message(r)  # one line, in the service's shape
        return
    [file] = r.json()["files"]
    shown = file["name"]
    assert 0 < len(shown) <= 255 and shown not in (".", "..")
    assert not any(c in shown for c in "/\\\x00\r\n\x1b\x7f\u202e")
    assert client.get(f"/v1/documents/{r.json()['id']}").json()["text"].strip() == "Gulls nest on the rock."


@pytest.mark.parametrize(("given", "shown"), [
    ("../../etc/notes.md", "notes.md"), ("..", "upload-1"), ("", "upload-1"), (None, "upload-1"),
    ("C:\\Users\\me\\report.pdf", "report.pdf"), ("re\x00port\x1b.md", "report.md"),
    ("\ud800notes.txt", "\ufffdnotes.txt"), ("x" * 300 + ".md", "x" * 252 + ".md"),
])
def test_the_shown_name_is_the_clients_name_cleaned(given, shown):
    assert shown_name(given, "upload-1") == shown


def test_an_uploaded_file_keeps_its_format_and_errors_name_it_as_the_client_did(client):
    body, headers = multipart(b"x" * 300 + b".md", b"# Gulls\n\nGulls nest on the rock.\n")
    assert client.post("/v1/documents", content=body, headers=headers).json()["files"][0]["format"] == "markdown"
    body, headers = multipart(b"../timetable.pdf", b"%PDF-1.4 not really")
    r = client.post("/v1/documents", content=body, headers=headers)
    assert r.status_code == 422 and "timetable.pdf" in message(r) and "upload-1" not in message(r)


# 3. PDF bombs and damaged page trees, uploaded: 422 naming the limit, read by the bounded job queue.

@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bombs")
    times = 50_000
    return {"flate": one_page(folder / "flate.pdf", stream(deflated_spaces(300), b"/Filter /FlateDecode")),
            "tree": one_page(folder / "tree.pdf", stream(TEXT_OPS), kids=b"[" + b"3 0 R " * times + b"]",
                             count=times),
            "looped": one_page(folder / "looped.pdf", stream(TEXT_OPS), kids=b"[3 0 R 2 0 R]", count=2)}


@pytest.mark.parametrize(("bomb", "refusal"), [
    ("flate", "flate.pdf: a compressed stream expands past 16 MB (a decompression bomb?); raise the limit with "
              "the server's max_pdf_stream_mb setting"),
    ("tree", "tree.pdf has 50,000 pages, over the limit of 10,000"),
    ("looped", "damaged PDF: looped.pdf (pdfium: "),
])
def test_an_uploaded_bomb_is_422_naming_the_limit(bombs, bomb, refusal):
    with served(read_limits=ReadLimits(max_pdf_stream_mb=16)) as c:
        files = [("file", (bombs[bomb].name, bombs[bomb].read_bytes(), "application/pdf"))]
        r = c.post("/v1/documents", files=files)
        assert r.status_code == 422 and refusal in message(r)
        assert c.get("/v1/documents").json() == []


def test_uploads_are_read_by_the_bounded_job_queue():
    calls: list[float] = []
    settings = Settings(light="fake:light", strong="fake:slow", prefill=False, queue=1)
    with registered("fake:light", FakeLLM(reply)), registered("fake:slow", slow_model(3, calls)), \
            LiveServer(create_app(settings)) as url:
        question = {"question": "When?", "text": TEXT, "method": "lc"}
        answering = threading.Thread(target=httpx.post, args=(f"{url}/v1/answer",),
                                     kwargs={"json": question, "timeout": 30})
        answering.start()
        deadline = time.monotonic() + 10
        while not calls and time.monotonic() < deadline:
            time.sleep(0.05)
        files = [("file", ("notes.txt", b"Gulls nest on the rock.", "text/plain"))]
        busy = httpx.post(f"{url}/v1/documents", files=files, timeout=30)
        assert busy.status_code == 429 and "busy" in busy.json()["detail"] and "Retry-After" in busy.headers
        answering.join(30)
        assert httpx.post(f"{url}/v1/documents", files=files, timeout=30).status_code == 201


SERVER = """
import sys
import uvicorn
from ragfunnel.llm import FakeLLM
from ragfunnel.llm.registry import registered
from ragfunnel.serve.app import Settings, create_app
with registered("fake:light", FakeLLM(lambda p, i: "nine")), registered("fake:strong", FakeLLM(lambda p, i: "nine")):
    uvicorn.run(create_app(Settings(light="fake:light", strong="fake:strong", prefill=False)),
                port=int(sys.argv[1]), log_level="warning")
"""


def peak_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's peak memory from /proc")
def test_the_servers_memory_stays_flat_while_it_refuses_bombs(bombs):
    """The default limits, a 300 MB flate bomb, once and then twice at once: 300 MB and 600 MB above idle are
    the targets; pdfium alone took 1.85 GB for one bomb of 1 GiB."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz").json()["status"] == "ok":
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        files = [("file", ("flate.pdf", bombs["flate"].read_bytes(), "application/pdf"))]
        warm = httpx.post(f"{url}/v1/documents", files=[("file", ("a.txt", b"warm up", "text/plain"))], timeout=60)
        assert warm.status_code == 201
        idle = peak_kb(server.pid)
        assert httpx.post(f"{url}/v1/documents", files=files, timeout=60).status_code == 422
        one = peak_kb(server.pid) - idle
        with ThreadPoolExecutor(2) as pool:
            statuses = list(pool.map(lambda _: httpx.post(f"{url}/v1/documents", files=files, timeout=60).status_code,
                                     range(2)))
        two = peak_kb(server.pid) - idle
    finally:
        server.terminate()
        server.wait(10)
    print(json.dumps({"idle_mb": idle // 1024, "one_bomb_mb": one // 1024, "two_bombs_mb": two // 1024}))
    assert statuses == [422, 422]
    assert one < 300 * 1024 and two < 600 * 1024
