"""The service and its inputs under hostile or careless use: one test per kind of failure a probe of 79
hostile requests can provoke, with scripted models (no model loads).

The kinds that need a real model or a real browser (SIGTERM mid-generation, the inspector with U+2028)
are in tests/test_serve_models.py.
"""

from __future__ import annotations

import http.server
import json
import logging
import math
import os
import socket
import subprocess
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
httpx = pytest.importorskip("httpx", reason="needs the [serve] extra")
from click.testing import CliRunner  # noqa: E402

from ragfunnel.cli.main import main  # noqa: E402
from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.app import Settings, create_app  # noqa: E402
from tests.helpers.cli import RAGFUNNEL  # noqa: E402
from tests.helpers.network import free_port  # noqa: E402
from tests.helpers.serve import TEXT, LiveServer, reply, served, slow_model  # noqa: E402


@pytest.fixture
def client():
    with served() as c:
        yield c


@pytest.fixture
def indexed(tmp_path):
    from ragfunnel.corpus.index_build import build_index
    from tests.helpers.corpora import corpus

    build_index(corpus(), tmp_path / "ix", source="test")
    return str(tmp_path / "ix")


class Listener:
    """An HTTP server on loopback that records every request it gets (a URL an attacker would choose)."""

    def __init__(self):
        self.seen: list[str] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the stdlib's name
                listener.seen.append(self.headers.get("Authorization", ""))
                self.send_response(500)
                self.end_headers()

            do_GET = do_POST  # noqa: N815

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


# 1. A client chose server-side models, files and URLs.

@pytest.mark.parametrize("option, value", [
    ("pre_ranker", "llm:openai:{url}#evil"),
    ("post_ranker", "openai:{url}#evil"),
    ("post_ranker", "gguf:/etc/shadow"),
    ("pre_ranker", "/etc"),
    ("pre_ranker", "/no/such/directory"),
])
def test_a_client_cannot_make_the_server_call_a_url_or_read_a_file(indexed, monkeypatch, option, value):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-users-secret")
    listener = Listener()
    try:
        with served(indexes={"a": indexed}) as c:
            r = c.post("/v1/answer", json={"index": "a", "method": "funnel", "question": "q",
                                           "options": {option: value.format(url=listener.url)}})
    finally:
        listener.close()
    assert r.status_code == 422 and f"options.{option} is set by the server's operator" in r.json()["detail"]
    assert listener.seen == [] and "root:" not in r.text  # nothing sent, nothing of the file shown
    # existing and missing directories answer alike: no map of the file system
    assert "does not exist" not in r.text


# 2. DNS rebinding: a page on another name reaching the loopback service.

def test_a_foreign_host_header_is_refused_on_every_path(client):
    doc = client.post("/v1/documents", json={"text": TEXT}).json()
    for path in (f"/v1/documents/{doc['id']}", "/v1/documents", "/", "/docs", "/openapi.json", "/healthz"):
        r = client.get(path, headers={"Host": "rebind.attacker.example"})
        assert r.status_code == 421, (path, r.status_code)
        assert "filler0" not in r.text and "--allowed-host" in r.json()["detail"]
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "localhost", "LOCALHOST:1"):
        assert client.get(f"/v1/documents/{doc['id']}", headers={"Host": host}).status_code == 200, host


def test_the_operator_can_allow_more_host_names():
    with served(allowed_hosts=["rag.internal"]) as c:
        assert c.get("/v1/models", headers={"Host": "rag.internal:8000"}).status_code == 200
        assert c.get("/v1/models", headers={"Host": "rag.internal.attacker.example"}).status_code == 421


def test_a_browser_page_of_another_origin_cannot_change_state(client):
    body = {"text": TEXT}
    foreign = client.post("/v1/documents", json=body, headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403 and "--cors-origin" in foreign.json()["detail"]
    assert client.post("/v1/documents", json=body, headers={"Origin": "null"}).status_code == 403
    same = client.post("/v1/documents", json=body, headers={"Origin": "http://127.0.0.1:8000"})
    assert same.status_code == 201
    assert client.post("/v1/documents", json=body).status_code == 201  # curl and SDKs send no Origin


def test_an_origin_the_operator_allowed_may_post():
    with served(cors_origins=["https://app.example"]) as c:
        r = c.post("/v1/documents", json={"text": TEXT}, headers={"Origin": "https://app.example"})
        assert r.status_code == 201 and r.headers["access-control-allow-origin"] == "https://app.example"


def test_any_host_needs_a_token():
    r = CliRunner().invoke(main, ["serve", "--allowed-host", "*"], env={"RAGFUNNEL_TOKEN": ""})
    assert r.exit_code == 1 and "set --token" in r.output and len(r.output.strip().splitlines()) == 1


# 3. Security headers, and /docs without a CDN.

def test_every_page_carries_the_security_headers(client):
    for path in ("/", "/app.js", "/v1/models", "/docs", "/nope", "/v1/documents/none"):
        r = client.get(path)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, path
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff", path


def test_the_api_docs_are_served_from_the_package(client):
    page = client.get("/docs")
    assert page.status_code == 200 and '<script src="docs.js">' in page.text
    assert "cdn" not in page.text.lower() and "https://" not in page.text
    assert "https://" not in client.get("/docs.js").text
    assert client.get("/redoc").status_code == 404
    assert "/v1/answer" in client.get("/openapi.json").json()["paths"]


# 4. A non-streaming client that disconnects cancels its job.

def test_a_client_that_hangs_up_cancels_its_job_streaming_or_not(caplog):
    caplog.set_level(logging.INFO, logger="ragfunnel.serve")
    calls: list[float] = []
    settings = Settings(light="fake:light", strong="fake:slow", prefill=False, queue=2)
    with registered("fake:light", FakeLLM(reply)), registered("fake:slow", slow_model(30, calls)), \
            LiveServer(create_app(settings)) as url:
        body = json.dumps({"question": "When?", "text": TEXT, "method": "lc"}).encode()
        for _ in range(3):  # more clients than the queue holds: each hang-up frees its place
            with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as s:
                s.sendall(b"POST /v1/answer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                time.sleep(0.5)
            deadline = time.monotonic() + 5
            while len(calls) % 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(calls) % 2 == 0, "the generation went on after its client left"
        assert calls[-1] - calls[-2] < 2  # stopped at once, not after 30 s
        assert httpx.get(f"{url}/healthz").json()["pending"] == 0
    assert "the client disconnected" in caplog.text


# 5 (SIGTERM) is in tests/test_serve_models.py: it needs the real CLI and a generation to stop.

def test_a_closed_queue_answers_waiting_and_running_jobs_at_once():
    from ragfunnel.serve.jobs import Cancelled, JobQueue

    gate = threading.Event()
    jobs = JobQueue(capacity=4)
    running = jobs.submit(lambda job: gate.wait(30), label="running")
    waiting = jobs.submit(lambda job: "never", label="waiting")
    time.sleep(0.1)
    started = time.monotonic()
    assert jobs.close(wait=0.2) is False  # the running one is stuck in work that cannot be interrupted
    assert time.monotonic() - started < 1
    for job in (running, waiting):
        with pytest.raises(Cancelled, match="the server is stopping"):
            job.future.result(0)
    with pytest.raises(Cancelled, match="stopping"):
        jobs.submit(lambda job: None, label="late")
    gate.set()


# 6. Wrongly typed option values.

@pytest.mark.parametrize("options, option", [
    ({"budget": "huge"}, "budget"), ({"chunk_words": "x"}, "chunk_words"), ({"budget": None}, "budget"),
    ({"samples": "5"}, "samples"), ({"stage1_budget": [1]}, "stage1_budget"), ({"seed": 1.5}, "seed"),
])
def test_wrongly_typed_options_are_422_naming_the_option(client, options, option):
    r = client.post("/v1/answer", json={"question": "q?", "text": TEXT, "method": "fb", "options": options})
    assert r.status_code == 422 and r.json()["detail"].startswith(f"options.{option} "), r.text


# 7. Lone surrogates.

SURROGATE_BODY = '{"text": "hello \\ud800 world ' + "word " * 50 + '", "name": "x\\udfff"}'


def test_lone_surrogates_in_a_request_become_replacement_characters(client, caplog):
    stored = client.post("/v1/documents", content=SURROGATE_BODY, headers={"Content-Type": "application/json"})
    assert stored.status_code == 201, stored.text
    assert client.get(f"/v1/documents/{stored.json()['id']}").json()["text"].startswith("hello \ufffd world")
    asked = client.post("/v1/answer", content='{"question": "when \\ud800?", "text": "the ferry leaves at nine", '
                                              '"method": "lc"}', headers={"Content-Type": "application/json"})
    assert asked.status_code == 200, asked.text
    bad = client.post("/v1/answer", content='{"question": "q", "text": "t", "options": {"budget": "\\ud800"}}',
                      headers={"Content-Type": "application/json"})
    assert bad.status_code == 422 and "budget" in bad.json()["detail"]
    assert "lone surrogate" in caplog.text


def test_eval_replaces_lone_surrogates_and_finishes(tmp_path, caplog):
    data = tmp_path / "d.jsonl"
    rows = [{"id": "1", "question": "When does the ferry leave?", "context": "The ferry leaves at nine.",
             "answers": ["nine"]},
            {"id": "2", "question": "hello \ud800 world?", "context": "Text \udc80 here.", "answers": ["x\ud800"]}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")  # json.dumps writes them as \ud800 escapes
    with registered("fake:e", FakeLLM(lambda prompt, i: "nine")):
        result = CliRunner().invoke(main, ["eval", str(data), "--methods", "lc", "--strong", "fake:e",
                                           "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    written = [json.loads(line) for line in (tmp_path / "run" / "rows.jsonl").read_text().splitlines()]
    assert [row["question"] for row in written] == ["When does the ferry leave?", "hello \ufffd world?"]
    assert written[1]["references"] == ["x\ufffd"] and (tmp_path / "run" / "failed.jsonl").read_text() == ""
    assert f"{data}:2" in caplog.text and "replaced with U+FFFD" in caplog.text


def test_an_index_reads_a_corpus_with_lone_surrogates(tmp_path):
    from ragfunnel.corpus import load_corpus

    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"title": "A \ud800", "text": "Body \udfff text"}) + "\n")
    (doc,) = load_corpus(path)
    assert doc.title == "A \ufffd" and doc.text == "Body \ufffd text"
    doc.text.encode("utf-8")


def test_ask_replaces_lone_surrogates_in_the_question(tmp_path):
    context = tmp_path / "c.txt"
    context.write_text("The ferry to Gull Rock leaves at nine.")
    with registered("fake:ask2", FakeLLM(lambda prompt, i: "nine")):
        result = CliRunner().invoke(main, ["ask", "when \udcff?", "--context", str(context), "--method", "lc",
                                           "--strong", "fake:ask2"])
    assert result.exit_code == 0 and result.stdout.strip() == "nine", result.output


# 8. U+2028 and U+2029 reach the browser escaped.

def test_line_separators_are_escaped_in_json_and_server_sent_events(client):
    text = "Line one\u2028line two\u2029 " + TEXT
    doc = client.post("/v1/documents", json={"text": text})
    assert doc.status_code == 201
    shown = client.get(f"/v1/documents/{doc.json()['id']}")
    assert "\u2028".encode() not in shown.content and b"\\u2028" in shown.content
    assert shown.json()["text"] == text
    with client.stream("POST", "/v1/answer", json={"question": "When does the ferry leave?", "text": text,
                                                   "method": "op", "options": {"budget": 400}, "stream": True}) as r:
        raw = b"".join(r.iter_bytes())
    assert "\u2028".encode() not in raw and "\u2029".encode() not in raw and b"event: result" in raw


def test_the_inspector_parses_server_sent_events_as_the_spec_says():
    node = subprocess.run(["node", "--version"], capture_output=True) if _has("node") else None
    if node is None or node.returncode:
        pytest.skip("node is not installed")
    from importlib.resources import files

    source = (files("ragfunnel.serve") / "static" / "app.js").read_text()
    function = source[source.index("function takeEvents"):source.index("// POST /v1/answer")]
    stream = ('event: token\ndata: {"text":"a\u2028b"}\n\nevent: result\r\ndata: {"x":\r\ndata: 1}\r\n\r\n'
              'event:\ndata: 2\n\nevent: to')
    script = function + f"console.log(JSON.stringify(takeEvents({json.dumps(stream)})));"
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True).stdout
    parsed = json.loads(out)
    assert parsed["events"] == [{"event": "token", "data": '{"text":"a\u2028b"}'},
                                {"event": "result", "data": '{"x":\n1}'}, {"event": "message", "data": "2"}]
    assert parsed["rest"] == "event: to"


def _has(program: str) -> bool:
    from shutil import which

    return which(program) is not None


# 9. Statuses that name the real problem.

def test_a_chunked_body_over_the_limit_is_413():
    with served(max_body_mb=1.0) as c:
        def chunks():
            yield b'{"text": "'
            for _ in range(10 * 16):
                yield b"x" * 65536
            yield b'"}'

        r = c.post("/v1/documents", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "1,048,576 bytes" in r.json()["detail"]


def test_a_bad_task_is_refused_when_the_document_is_posted():
    with served(prefill=True) as c:
        r = c.post("/v1/documents", json={"text": TEXT, "task": "bogus/../x"})
        assert r.status_code == 422 and "unknown task 'bogus/../x'" in r.json()["detail"]
        assert c.get("/v1/documents").json() == []


def test_a_huge_question_names_its_own_limit(client):
    r = client.post("/v1/answer", json={"question": "why " * 250_000, "text": TEXT})
    assert r.status_code == 422
    assert "'body.question'" in r.json()["detail"] and "over the limit of 20,000" in r.json()["detail"]
    assert "budget" not in r.json()["detail"] and len(r.content) < 2000  # the question is not echoed back


def test_a_prefill_that_fails_never_stays_queued():
    def broken(prompt, i):
        raise RuntimeError("the model fell over")

    with served(light=broken, prefill=True) as c:
        doc = c.post("/v1/documents", json={"text": TEXT}).json()
        deadline = time.monotonic() + 5
        while "queued" in c.get("/v1/documents").json()[0]["prefill"].values() and time.monotonic() < deadline:
            time.sleep(0.05)
        prefill = c.get("/v1/documents").json()[0]["prefill"]
        assert prefill["light"].startswith("failed: the model fell over") and doc["id"]
        assert "queued" not in prefill.values() and "reading" not in prefill.values()


# 10. Speed files.

@pytest.mark.parametrize("bad", [{"slowdown_tokens": 0}, {"prefill_tps": float("nan")}, {"decode_tps": -5.0},
                                 {"batch_step_cost": float("inf")}, {"prefill_tps": "fast"}])
def test_a_speed_file_with_unusable_values_is_measured_again(tmp_path, monkeypatch, caplog, bad):
    from ragfunnel.llm import speed

    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(speed, "_measured", {})
    llm = FakeLLM(lambda prompt, i: "1 2 3 4", name="fake-speed")
    path = speed._profile_path(llm)
    path.parent.mkdir(parents=True)
    machine = speed.machine_of(llm.fingerprint)
    saved = {"prefill_tps": 100.0, "decode_tps": 10.0, "batch_step_cost": 0.5, "slowdown_tokens": 4000.0, **bad}
    path.write_text(json.dumps({"machine": machine, "profile": saved}).replace("NaN", "NaN"))
    profile = speed.speed_of(llm)
    values = (profile.prefill_tps, profile.decode_tps, profile.slowdown_tokens)
    assert all(math.isfinite(v) and v > 0 for v in values)
    assert "unusable" in caplog.text and "measuring it again" in caplog.text
    assert profile.read_seconds(1000) > 0


# 11. Flat vectors of another dimension than the embedder.

def test_flat_vectors_of_another_dimension_are_refused_when_the_index_opens(tmp_path, monkeypatch):
    pytest.importorskip("networkx", reason="needs the [corpus] extra")
    import numpy as np

    from ragfunnel.corpus.index import CorpusIndex
    from ragfunnel.corpus.index_build import build_index
    from ragfunnel.corpus.index_manifest import IndexConfig
    from ragfunnel.errors import InputError
    from tests.helpers.vectors import corpus

    rng = np.random.default_rng(0)

    def embed(texts, desc, **_):
        x = rng.standard_normal((len(texts), 64)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    monkeypatch.setattr("ragfunnel.corpus.index_build._embed", embed)
    build_index(corpus(), tmp_path / "ix", IndexConfig(flat=True, passage_words=5, faiss="none"), source="test")
    with pytest.raises(InputError) as refused:
        CorpusIndex(tmp_path / "ix")
    assert "384-d" in str(refused.value) and "rebuild it with" in str(refused.value)
    result = CliRunner().invoke(main, ["search", str(tmp_path / "ix"), "gull", "--flat", "--exact"])
    assert result.exit_code == 1 and "unexpected" not in result.output and "384-d" in result.output


# 12. serve's startup errors: one line, exit code 1; a busy port found before the models load.

def serve_fails(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RAGFUNNEL, "serve", "--port", str(free_port()), "--no-cache", *args],
                          capture_output=True, text=True, timeout=120)


def assert_one_error_line(result: subprocess.CompletedProcess, match: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and match in errors[0], result.stderr
    assert "Traceback" not in result.stderr and "startup failed" not in result.stderr


def test_serve_with_a_missing_model_file_is_one_line(tmp_path):
    assert_one_error_line(serve_fails("--light", f"gguf:{tmp_path / 'none.gguf'}"), "does not exist")


def test_serve_with_a_damaged_index_is_one_line(tmp_path, indexed):
    (tmp_path / "ix" / "manifest.json").write_text("{not json")
    assert_one_error_line(serve_fails("--light", "bundled:smollm2-135m", "--strong", "bundled:smollm2-135m",
                                      "--index", f"a={indexed}"), "manifest")


def test_serve_finds_a_busy_port_before_loading_models():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run([RAGFUNNEL, "serve", "--port", str(port)], capture_output=True, text=True,
                                timeout=120)
    assert_one_error_line(result, f"port {port} on 127.0.0.1 is in use")
    assert "loading" not in result.stderr and time.monotonic() - started < 20


# 13. A named pipe given as a model file.

def test_a_named_pipe_as_a_model_path_is_refused_at_once(tmp_path):
    from ragfunnel.errors import ModelError
    from ragfunnel.llm.gguf import check_gguf_file

    pipe = tmp_path / "model.gguf"
    os.mkfifo(pipe)
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(_raised(check_gguf_file, pipe)), daemon=True)
    thread.start()
    thread.join(5)
    assert outcome and isinstance(outcome[0], ModelError) and "not a regular file" in str(outcome[0])
    result = subprocess.run([RAGFUNNEL, "ask", "q?", "--context", "-", "--method", "lc", "--strong", f"gguf:{pipe}"],
                            input="some text here", capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "not a regular file" in result.stderr


def _raised(function, *args):
    try:
        function(*args)
    except Exception as e:  # noqa: BLE001 - the test inspects it
        return e
    return None


# Also seen: an empty completion kept in the call cache and served again.

def test_an_empty_completion_is_never_stored_in_the_call_cache(tmp_path):
    from ragfunnel.llm.base import SamplingParams
    from ragfunnel.llm.call_cache import CallCache
    from ragfunnel.types import Completion

    cache = CallCache(tmp_path / "calls.sqlite")
    params = SamplingParams(max_tokens=8)
    cache.put("model", "prompt", params, 1, [Completion("  ", 3, 0, 0.1)])
    assert cache.get("model", "prompt", params, 1) is None
    cache.put("model", "prompt", params, 2, [Completion("nine", 3, 1, 0.1), Completion("", 3, 0, 0.1)])
    assert cache.get("model", "prompt", params, 2) is None
    cache.put("model", "prompt", params, 1, [Completion("nine", 3, 1, 0.1)])
    assert cache.get("model", "prompt", params, 1)[0].text == "nine"


# Found in review: what else a request could break.

def test_an_unexpected_failure_is_one_line_streaming_or_not(caplog):
    def buggy(prompt, i):
        raise ValueError("a bug in a backend")

    with served(light=buggy) as c:
        body = {"question": "When?", "text": TEXT, "method": "fb", "options": {"budget": 400}}
        r = c.post("/v1/answer", json=body)
        assert r.status_code == 500 and "unexpected ValueError: a bug in a backend" in r.json()["detail"]
        with c.stream("POST", "/v1/answer", json={**body, "stream": True}) as streamed:
            events = [line for line in streamed.iter_lines() if line.startswith(("event:", "data:"))]
        assert events[-2] == "event: error" and json.loads(events[-1][len("data: "):])["status"] == 500
        assert c.get("/healthz").json() == {"status": "ok", "pending": 0}
    assert not [r for r in caplog.records if r.exc_info]


def test_a_job_cancelled_while_waiting_lets_go_of_its_request_at_once():
    from ragfunnel.serve.jobs import Cancelled, JobQueue

    gate = threading.Event()
    jobs = JobQueue(capacity=2)
    jobs.submit(lambda job: gate.wait(30), label="running")
    big = "x" * 1_000_000
    waiting = jobs.submit(lambda job: len(big), label="waiting")
    waiting.cancel("the client disconnected")
    with pytest.raises(Cancelled, match="the client disconnected"):
        waiting.future.result(0)  # answered now, not when the worker gets to it
    assert waiting.work.__name__ == "_cancelled" and waiting.on_text is None
    assert jobs.pending == 1
    gate.set()
    jobs.close()


def test_funnel_answers_and_search_share_one_load_of_the_rankers(indexed, monkeypatch):
    loads = []

    class Ranker:
        def __init__(self, kind):
            loads.append(kind)

        def __getattr__(self, name):
            raise AttributeError(name)

    monkeypatch.setattr("ragfunnel.retrieve.rerank.load_pre_ranker", lambda *a, **k: Ranker("pre"))
    monkeypatch.setattr("ragfunnel.retrieve.attention.load_post_ranker", lambda *a, **k: Ranker("post"))
    with served(indexes={"a": indexed}) as c:
        for top in (1, 2, 3):
            c.post("/v1/answer", json={"index": "a", "method": "funnel", "question": "q?",
                                       "options": {"top_passages": top}})
        c.post("/v1/search", json={"index": "a", "question": "q?"})
    assert sorted(loads) == ["post", "pre"]


def test_a_lone_surrogate_in_an_option_name_is_422_not_500(client):
    r = client.post("/v1/answer", content='{"question": "q", "text": "t", "options": {"\\ud800": 1}}',
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "does not take" in r.json()["detail"]


def test_a_port_another_server_holds_is_found_by_the_second(tmp_path):
    from ragfunnel.cli.serve import listen
    from ragfunnel.errors import ConfigError

    first = listen("127.0.0.1", 0)
    port = first.getsockname()[1]
    try:
        with pytest.raises(ConfigError, match=f"port {port} on 127.0.0.1 is in use"):
            listen("127.0.0.1", port)
    finally:
        first.close()
    assert listen("localhost", 0).family == socket.AF_INET


def test_a_browser_preflight_needs_no_token_and_star_allows_any_origin():
    with served(token="s3cret", cors_origins=["*"]) as c:
        preflight = c.options("/v1/documents", headers={"Origin": "https://app.example",
                                                        "Access-Control-Request-Method": "POST"})
        assert preflight.status_code == 200
        posted = c.post("/v1/documents", json={"text": TEXT}, headers={"Origin": "https://app.example",
                                                                       "Authorization": "Bearer s3cret"})
        assert posted.status_code == 201
        assert c.post("/v1/documents", json={"text": TEXT}).status_code == 401


@pytest.mark.parametrize("host, name", [
    ("[::1]:8000", "::1"), ("[::1]evil.example", ""), ("LOCALHOST.:80", "localhost"), ("127.0.0.1:x", ""),
    ("a:b:c", ""), ("rebind.attacker.example", "rebind.attacker.example"),
])
def test_host_headers_parse_strictly(host, name):
    from ragfunnel.serve.guards import host_name

    assert host_name(host) == name


def test_deeply_nested_json_and_huge_choices_are_named(client):
    nested = b'{"question": "q", "text": "t", "options": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = client.post("/v1/answer", content=nested, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "nests too deeply" in r.json()["detail"]
    r = client.post("/v1/answer", json={"question": "q", "text": TEXT, "choices": ["x" * 20_000]})
    assert r.status_code == 422 and "'body.choices.0'" in r.json()["detail"]
