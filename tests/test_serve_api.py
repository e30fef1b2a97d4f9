"""The service's API contract with scripted models (no model loads): statuses, limits, tokens, streaming.

The same paths run against a real uvicorn and real bundled models in tests/test_serve_models.py.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from ragfunnel.confidence import current_calibration
from ragfunnel.documents.limits import MB

pytest.importorskip("fastapi", reason="needs the [serve] extra")

from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.methods import METHODS, described  # noqa: E402
from ragfunnel.serve.app import Settings, create_app  # noqa: E402
from ragfunnel.serve.jobs import Cancelled, JobQueue, QueueFull  # noqa: E402
from tests.helpers.serve import TEXT, local, reply  # noqa: E402


@pytest.fixture
def client(request):
    settings = getattr(request, "param", None) or Settings(light="fake:light", strong="fake:strong", prefill=False)
    with registered("fake:light", FakeLLM(reply, name="fake-light")), \
            registered("fake:strong", FakeLLM(reply, name="fake-strong")), \
            local(create_app(settings)) as c:
        yield c


def test_health_models_and_methods(client):
    assert client.get("/healthz").json() == {"status": "ok", "pending": 0}
    models = client.get("/v1/models").json()
    assert models["light"]["spec"] == "fake:light" and models["strong"]["name"] == "fake-strong"
    methods = client.get("/v1/methods").json()
    assert methods["default"] == "auto" and "budget" in methods["methods"]["fb"]
    assert "strong" not in methods["methods"]["fb"]  # the operator's to choose
    assert methods["descriptions"] == {name: described(name) for name in METHODS}


def test_a_stored_document_is_answered_with_the_inspectors_view(client):
    doc = client.post("/v1/documents", json={"text": TEXT, "name": "ferry"}).json()
    again = client.post("/v1/documents", json={"text": TEXT}).json()
    assert doc["id"] == again["id"] and doc["words"] == 1408
    r = client.post("/v1/answer", json={"question": "When does the ferry to Gull Rock leave?", "document_id": doc["id"],
                                         "method": "fb", "options": {"budget": 400, "chunk_words": 300}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"] == "nine" and [s["name"] for s in body["trace"]["stages"]][-2:] == ["stage3_generate",
                                                                                              "confidence"]
    assert body["supported"] == (body["confidence"] >= current_calibration().supported_at)
    chunks = body["chunks"]
    assert len(chunks) == 5 and [c["position"] for c in chunks if c["read"]] == [2]  # the ferry's chunk only
    best = max(chunks, key=lambda c: c["draft_score"])
    assert best["position"] == 2 and best["question_score"] == 1.0 and best["draft_score"] == 1.0
    assert len(body["samples"]) == 5


@pytest.mark.parametrize("body, status, detail", [
    ({"question": "q?", "text": TEXT, "method": "nope"}, 422, "unknown method 'nope'"),
    ({"question": "q?", "text": TEXT, "method": "op", "options": {"samples": 3}}, 422, "does not take options.samples"),
    ({"question": "q?", "text": TEXT, "options": {"strong": "gguf:/etc/passwd"}}, 422, "set by the server's operator"),
    ({"question": "q?", "document_id": "0123456789abcdef"}, 404, "no document '0123456789abcdef'"),
    ({"question": "q?", "text": "   "}, 422, "empty or whitespace only"),
    ({"question": "q?"}, 422, "exactly one of document_id"),
    ({"text": TEXT}, 422, "question"),
    ({"question": "q?", "text": TEXT, "surprise": 1}, 422, "surprise"),
])
def test_bad_requests_name_the_problem(client, body, status, detail):
    r = client.post("/v1/answer", json=body)
    assert r.status_code == status and detail in json.dumps(r.json()["detail"])


def test_malformed_json_is_422_and_a_body_that_is_not_utf8_is_400(client):
    r = client.post("/v1/answer", content=b'{"question": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"].startswith("the request body is not valid JSON (Expecting value")
    r = client.post("/v1/answer", content=b'{"question": "\xff"}', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not UTF-8 text" in r.json()["detail"]


@pytest.mark.parametrize("client", [Settings(light="fake:light", strong="fake:strong", max_body_mb=2000 / MB)],
                         indirect=True)
def test_an_oversized_body_is_413(client):
    r = client.post("/v1/documents", json={"text": TEXT})
    assert r.status_code == 413 and "over the limit of 2,000 bytes" in r.json()["detail"]


@pytest.mark.parametrize("client", [Settings(light="fake:light", strong="fake:strong", token="s3cret")],
                         indirect=True)
def test_a_token_guards_the_api_but_not_the_page(client):
    assert client.get("/v1/models").status_code == 401
    assert client.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/").status_code == 200 and "ragfunnel inspector" in client.get("/").text


def test_streaming_sends_stages_then_the_result(client):
    with client.stream("POST", "/v1/answer", json={"question": "When does the ferry leave?", "text": TEXT,
                                                   "method": "op", "options": {"budget": 400}, "stream": True}) as r:
        events = [line[len("event: "):] for line in r.iter_lines() if line.startswith("event: ")]
    assert events == ["stage_started", "stage"] * 3 + ["result"]  # retrieve, generate, confidence


def test_a_failing_model_is_503_and_the_server_keeps_serving(client):
    from ragfunnel.errors import BackendUnavailable
    from ragfunnel.llm.registry import resolve

    strong = resolve("fake:strong")
    good = strong._reply
    strong._reply = lambda prompt, i: (_ for _ in ()).throw(BackendUnavailable("the model server went away"))
    r = client.post("/v1/answer", json={"question": "When?", "text": TEXT, "method": "lc"})
    assert r.status_code == 503 and r.json()["detail"] == "the model server went away"
    strong._reply = good
    assert client.post("/v1/answer", json={"question": "When?", "text": TEXT, "method": "lc"}).status_code == 200


def test_the_queue_is_bounded_and_cancels_what_nobody_waits_for():
    gate = threading.Event()
    jobs = JobQueue(capacity=2)
    first = jobs.submit(lambda job: gate.wait(10), label="first")
    second = jobs.submit(lambda job: job.check() or "ran", label="second")
    with pytest.raises(QueueFull) as full:
        jobs.submit(lambda job: None, label="third")
    assert full.value.retry_after >= 1
    second.cancel("the client disconnected")
    gate.set()
    assert first.future.result(5) is True
    with pytest.raises(Cancelled):
        second.future.result(5)
    deadline = time.monotonic() + 5
    while jobs.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert jobs.submit(lambda job: "room again", label="fourth").future.result(5) == "room again"
    jobs.close()


def test_a_corpus_method_answers_from_an_index_the_operator_named(tmp_path):
    from ragfunnel.corpus.index_build import build_index
    from tests.helpers.corpora import corpus

    build_index(corpus(), tmp_path / "ix", source="test")
    settings = Settings(light="fake:light", strong="fake:strong", prefill=False,
                        indexes={"lights": str(tmp_path / "ix")})
    with registered("fake:light", FakeLLM(reply)), \
            registered("fake:strong", FakeLLM(lambda prompt, i: "Port Ellis" if "Port Ellis" in prompt else "?")), \
            local(create_app(settings)) as client:
        r = client.post("/v1/answer", json={"question": "Where was Martha Quill born?", "index": "lights",
                                            "method": "drag", "options": {"documents": 2}})
        assert r.status_code == 200, r.text
        assert r.json()["answer"] == "Port Ellis" and r.json()["method"] == "drag"
        missing = client.post("/v1/answer", json={"question": "q?", "index": "/etc", "method": "drag"})
        assert missing.status_code == 404 and "this server has: lights" in missing.json()["detail"]
        wrong_kind = client.post("/v1/answer", json={"question": "q?", "text": TEXT, "method": "drag"})
        assert wrong_kind.status_code == 422 and "drag answers from a corpus index" in wrong_kind.json()["detail"]
        assert client.get("/v1/methods").json()["kinds"]["drag"] == "corpus"


def test_a_server_reachable_from_other_machines_needs_a_token():
    from click.testing import CliRunner

    from ragfunnel.cli.main import main

    r = CliRunner().invoke(main, ["serve", "--host", "0.0.0.0"], env={"RAGFUNNEL_TOKEN": ""})
    assert r.exit_code == 1
    assert r.stderr == ("error: --host 0.0.0.0 is reachable from other machines; set --token (or $RAGFUNNEL_TOKEN) "
                        "so only clients with it are answered, or bind 127.0.0.1\n")


def test_request_logs_carry_timings_but_never_the_text(client, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="ragfunnel.serve")
    secret = "Zanzibarian" + " nine" * 50
    doc = client.post("/v1/documents", json={"text": secret}).json()
    client.post("/v1/answer", json={"question": "When does it leave?", "document_id": doc["id"], "method": "lc"})
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "ragfunnel.serve")
    assert "POST /v1/answer 200" in logged and "lc answer:" in logged
    assert "Zanzibarian" not in logged and "When does it leave" not in logged


def test_a_request_past_its_deadline_is_504_and_the_server_goes_on():
    def slow(prompt, i):
        time.sleep(2)
        return "nine"

    settings = Settings(light="fake:light", strong="fake:strong", prefill=False, deadline=1)  # the shortest allowed
    with registered("fake:light", FakeLLM(reply)), registered("fake:strong", FakeLLM(slow)), \
            local(create_app(settings)) as client:
        r = client.post("/v1/answer", json={"question": "When?", "text": TEXT, "method": "lc"})
        assert r.status_code == 504 and "deadline of 1 s" in r.json()["detail"]
        assert client.get("/healthz").json()["status"] == "ok"


def test_search_names_the_indexes_the_server_has(client):
    r = client.post("/v1/search", json={"index": "../etc", "question": "q?"})
    assert r.status_code == 404 and "this server has: none (its operator names them" in r.json()["detail"]
    assert client.post("/v1/search", json={"index": "x", "question": "q?", "top_k": 0}).status_code == 422


def test_documents_are_uploaded_as_files_and_answers_cite_their_pages(client, tmp_path):
    from tests.helpers.documents import make_pdf

    pdf = make_pdf(tmp_path / "timetable.pdf", ["Harbour notes " * 40, "The ferry to Gull Rock leaves at nine."])
    files = [("file", ("timetable.pdf", pdf.read_bytes(), "application/pdf")),
             ("file", ("../../etc/notes.md", b"# Gulls\n\nGulls nest on the rock.\n", "text/markdown"))]
    doc = client.post("/v1/documents", files=files, data={"name": "harbour"})
    assert doc.status_code == 201, doc.text
    doc = doc.json()
    assert doc["name"] == "harbour"
    assert [(f["name"], f["format"], f["pages"]) for f in doc["files"]] == [("timetable.pdf", "pdf", 2),
                                                                           ("notes.md", "markdown", 0)]
    r = client.post("/v1/answer", json={"question": "When does the ferry to Gull Rock leave?",
                                         "document_id": doc["id"], "method": "op", "options": {"chunk_words": 20}})
    body = r.json()
    first = body["citations"][0]
    assert (first["file"], first["page"]) == ("timetable.pdf", 2)
    assert first["quote"] == "The ferry to Gull Rock leaves at nine."
    text = client.get(f"/v1/documents/{doc['id']}").json()["text"]
    assert text[first["context_start"]:].startswith(first["quote"])
    assert any(c["where"] == "timetable.pdf · p. 2" for c in body["chunks"])


@pytest.mark.parametrize(("files", "status", "match"), [
    ([("file", ("locked.pdf", b"%PDF-1.4 garbage", "application/pdf"))], 422, "damaged"),
    ([("other", ("a.txt", b"text", "text/plain"))], 422, "holds no files"),
    ([("file", (f"f{i}.txt", b"text", "text/plain")) for i in range(21)], 400, "Too many files"),
])
def test_bad_uploads_get_one_line(client, files, status, match):
    r = client.post("/v1/documents", files=files)
    assert r.status_code == status and match in r.json()["detail"]
