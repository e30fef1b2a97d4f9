"""``DELETE /v1/documents/{id}``: a stored document removed, an unknown one 404, one an answer is reading 409
(the answer ends normally)."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
httpx = pytest.importorskip("httpx", reason="needs the [serve] extra")

from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.app import Settings, create_app  # noqa: E402
from ragfunnel.serve.documents import DocumentInUse, DocumentStore  # noqa: E402
from tests.helpers.serve import TEXT, LiveServer, local, reply  # noqa: E402

SETTINGS = {"light": "fake:light", "strong": "fake:strong", "prefill": False}


@pytest.fixture
def client():
    with registered("fake:light", FakeLLM(reply)), registered("fake:strong", FakeLLM(reply)), \
            local(create_app(Settings(**SETTINGS))) as c:
        yield c


def test_a_document_is_added_listed_removed_and_then_unknown(client):
    doc_id = client.post("/v1/documents", json={"text": TEXT, "name": "ferry"}).json()["id"]
    assert [d["id"] for d in client.get("/v1/documents").json()] == [doc_id]
    removed = client.delete(f"/v1/documents/{doc_id}")
    assert removed.status_code == 204 and removed.content == b""
    assert client.get("/v1/documents").json() == []
    assert client.get(f"/v1/documents/{doc_id}").status_code == 404
    answer = client.post("/v1/answer", json={"question": "When?", "document_id": doc_id, "method": "lc"})
    assert answer.status_code == 404 and f"no document {doc_id!r}" in answer.json()["detail"]
    assert client.post("/v1/documents", json={"text": TEXT}).json()["id"] == doc_id  # stored again, same id


def test_an_unknown_document_is_404_naming_it(client):
    r = client.delete("/v1/documents/0123456789abcdef")
    assert r.status_code == 404
    assert r.json() == {"detail": "no document '0123456789abcdef'; GET /v1/documents lists the stored ones"}


def test_the_route_and_its_statuses_are_in_the_api_reference(client):
    delete = client.get("/openapi.json").json()["paths"]["/v1/documents/{doc_id}"]["delete"]
    assert {"204", "404", "409"} <= set(delete["responses"]) and "409" in delete["description"]


def test_a_document_being_answered_is_409_and_the_answer_ends_normally():
    entered, release = threading.Event(), threading.Event()

    def held(prompt: str, i: int) -> str:
        entered.set()
        release.wait(30)
        return "nine"

    with registered("fake:light", FakeLLM(reply)), registered("fake:strong", FakeLLM(held)), \
            LiveServer(create_app(Settings(**SETTINGS))) as url:
        doc_id = httpx.post(f"{url}/v1/documents", json={"text": TEXT}).json()["id"]
        answered: dict[str, httpx.Response] = {}
        asking = threading.Thread(target=lambda: answered.setdefault("r", httpx.post(
            f"{url}/v1/answer", json={"question": "When?", "document_id": doc_id, "method": "lc"}, timeout=30)))
        asking.start()
        assert entered.wait(30)
        refused = httpx.delete(f"{url}/v1/documents/{doc_id}")
        assert refused.status_code == 409, refused.text
        assert refused.json() == {"detail": f"document {doc_id!r} is being answered now; remove it again once "
                                            "the answer has ended"}
        assert [d["id"] for d in httpx.get(f"{url}/v1/documents").json()] == [doc_id]
        release.set()
        asking.join(30)
        assert answered["r"].status_code == 200 and answered["r"].json()["answer"] == "nine"
        assert httpx.delete(f"{url}/v1/documents/{doc_id}").status_code == 204
        assert httpx.get(f"{url}/healthz").json()["pending"] == 0


def test_the_store_refuses_to_remove_a_document_while_it_is_read_and_not_after():
    store = DocumentStore(limit=4)
    doc, _ = store.add("The ferry leaves at nine.")
    with store.reading(doc), store.reading(doc):
        with pytest.raises(DocumentInUse, match="being answered now"):
            store.remove(doc.id)
    assert store.remove(doc.id) is doc and store.all() == []
    with pytest.raises(KeyError):
        store.remove(doc.id)
    with store.reading(doc):  # an answer queued before the removal still reads its text
        assert doc.located.text == "The ferry leaves at nine."
