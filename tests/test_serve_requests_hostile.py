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
pytest.importorskip("pypdfium2", reason="needs the [documents] extra")
from fastapi.exceptions import RequestValidationError  # noqa: E402

from ragfunnel.bounded import MAX_JSON_DEPTH  # noqa: E402
from ragfunnel.documents import ReadLimits  # noqa: E402
from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.app import Settings, create_app  # noqa: E402
from ragfunnel.serve.openai_compat import CHAT_PATH  # noqa: E402
from ragfunnel.serve.request_bodies import (  # noqa: E402
    NAME_CHARS,
    TASK_CHARS,
    AnswerIn,
    distinct_names,
    json_body,
    shown_name,
)
from tests.helpers.documents import TEXT_OPS, deflated_spaces, one_page, stream  # noqa: E402
from tests.helpers.network import free_port  # noqa: E402
from tests.helpers.serve import TEXT, LiveServer, reply, served, slow_model  # noqa: E402

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


def test_two_uploads_of_one_name_are_told_apart_and_each_cited_in_its_own_text(client):
    files = [("file", ("notes.txt", b"The ferry to Gull Rock leaves at nine.\n", "text/plain")),
             ("file", ("notes.txt", b"Gulls nest on the rock. " * 40 + b"\n", "text/plain"))]
    doc = client.post("/v1/documents", files=files)
    assert doc.status_code == 201, doc.text
    assert [f["name"] for f in doc.json()["files"]] == ["notes.txt", "notes (2).txt"]
    r = client.post("/v1/answer", json={"question": "When does the ferry to Gull Rock leave?",
                                         "document_id": doc.json()["id"], "method": "op",
                                         "options": {"chunk_words": 20}})
    [cited] = r.json()["citations"]
    assert (cited["file"], cited["quote"]) == ("notes.txt", "The ferry to Gull Rock leaves at nine.")
    text = client.get(f"/v1/documents/{doc.json()['id']}").json()["text"]
    assert text[cited["context_start"]:].startswith(cited["quote"])


def test_a_citation_is_placed_by_its_files_text_when_files_share_a_name():
    from types import SimpleNamespace

    from ragfunnel.documents import LocatedContext, SourceDocument
    from ragfunnel.serve.documents import citations_view
    from ragfunnel.types import Citation

    quote = "The ferry leaves at nine."
    located = LocatedContext.join([SourceDocument.of_text("notes.txt", quote),
                                   SourceDocument.of_text("notes.txt", "Gulls nest on the rock. " * 5)])
    cited = Citation(file="notes.txt", start=0, end=len(quote), quote=quote)
    [view] = citations_view(located, SimpleNamespace(citations=[cited]))
    assert view["context_start"] == located.starts[0]
    assert located.text[view["context_start"]:].startswith(quote)


@pytest.mark.parametrize(("given", "shown"), [
    (["notes.txt", "notes.txt"], ["notes.txt", "notes (2).txt"]),
    (["a.md", "a.md", "a (2).md"], ["a.md", "a (3).md", "a (2).md"]),  # never a name the client gave another
    (["README", "README", "README"], ["README", "README (2)", "README (3)"]),
    (["Notes.PDF", "Notes.PDF", "notes.pdf"], ["Notes.PDF", "Notes (2).PDF", "notes.pdf"]),
    (["x" * 252 + ".md"] * 2, ["x" * 252 + ".md", "x" * 248 + " (2).md"]),  # within 255 characters, suffix kept
])
def test_repeated_upload_names_are_made_distinct(given, shown):
    assert distinct_names(given) == shown


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


# 4. Every field bounded alike on every route that takes it, and a value echoed in an error cut short.

def test_a_name_over_the_limit_is_refused_alike_as_json_and_as_an_upload_field(client):
    too_long = "n" * (NAME_CHARS + 1)
    as_json = client.post("/v1/documents", json={"text": TEXT, "name": too_long})
    as_field = client.post("/v1/documents", files=[("file", ("notes.txt", b"Gulls nest.", "text/plain"))],
                           data={"name": too_long})
    assert as_json.status_code == as_field.status_code == 422
    assert message(as_json) == message(as_field)
    assert "'body.name'" in message(as_field) and f"at most {NAME_CHARS}" in message(as_field)
    huge = client.post("/v1/documents", files=[("file", ("notes.txt", b"Gulls nest.", "text/plain"))],
                       data={"name": "n" * 1_000_000})
    assert huge.status_code == 422 and len(huge.content) < 2000
    within = client.post("/v1/documents", files=[("file", ("notes.txt", b"Gulls nest.", "text/plain"))],
                         data={"name": "n" * NAME_CHARS})
    assert within.status_code == 201 and within.json()["name"] == "n" * NAME_CHARS
    assert client.get("/v1/documents").json()[0]["name"] == "n" * NAME_CHARS  # nothing longer was stored


def test_an_upload_field_task_is_bounded_as_the_json_one_is(client):
    files = [("file", ("notes.txt", b"Gulls nest.", "text/plain"))]
    r = client.post("/v1/documents", files=files, data={"task": "t" * 1_000_000})
    assert r.status_code == 422 and "'body.task'" in message(r) and f"at most {TASK_CHARS}" in message(r)
    assert len(r.content) < 2000 and client.get("/v1/documents").json() == []


def test_a_document_named_by_its_files_is_within_the_name_limit(client):
    files = [("file", (f"{i:02d}" + "x" * 247 + ".txt", b"Gulls nest.", "text/plain")) for i in range(20)]
    r = client.post("/v1/documents", files=files)
    assert r.status_code == 201, r.text
    assert len(r.json()["name"]) == NAME_CHARS and r.json()["name"].startswith("00xxx")


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_a_huge_document_id_is_cut_in_the_404_that_echoes_it(client, method):
    r = client.request(method, "/v1/documents/" + "d" * 60_000)  # near the longest URL httpx sends
    assert r.status_code == 404 and len(r.content) < 1000
    assert message(r).startswith("no document 'ddd") and "…" in message(r)


def test_a_huge_option_name_is_refused_without_echoing_it_whole(client):
    r = client.post("/v1/answer", json={"question": "q", "text": TEXT, "options": {"Z" * 100_000: 1}})
    assert r.status_code == 422 and len(r.content) < 2000
    assert message(r).startswith("method auto does not take 'ZZZ") and "options.budget" in message(r)
    assert "\x1e" not in message(r)


@pytest.mark.parametrize("path", [CHAT_PATH, "/v1/documents", "/v1/answer", "/v1/search"])
def test_an_integer_of_5000_digits_is_a_400_naming_it_never_a_500(client, path):
    r = client.post(path, content=b'{"top_k": ' + b"7" * 5000 + b"}", headers={"Content-Type": "application/json"})
    assert r.status_code in (400, 422), r.text
    assert "digits" in r.text and len(r.text) < 2000
