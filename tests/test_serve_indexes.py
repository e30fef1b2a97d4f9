"""`serve --watch NAME=DIR` and the indexes a client can see: GET /v1/indexes and /v1/indexes/{name} (a watched
folder's files, failures and updates), its status events, a dropped file searchable once its update is in,
`--watch`'s refusals, and MCP's list_indexes giving what GET /v1/indexes gives (scripted models and rankers)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ragfunnel.corpus.index_build import build_index
from tests.helpers.cli import invoke, one_line
from tests.helpers.corpora import corpus
from tests.helpers.rankers import WordOverlap

pytest.importorskip("fastapi", reason="needs the [serve] extra")
import httpx  # noqa: E402

from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.app import Settings, create_app  # noqa: E402
from ragfunnel.serve.watching import watched_index_dir  # noqa: E402
from tests.helpers.serve import LiveServer, reply, served  # noqa: E402


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def word_rankers(monkeypatch):
    """Both funnel rankers scripted, wherever the service loads them."""
    monkeypatch.setattr("ragfunnel.retrieve.rerank.load_pre_ranker", lambda *a, **k: WordOverlap())
    monkeypatch.setattr("ragfunnel.retrieve.attention.load_post_ranker", lambda *a, **k: WordOverlap())


@pytest.fixture
def fixed(tmp_path):
    build_index(corpus(), tmp_path / "ix", source="test")
    return str(tmp_path / "ix")


@pytest.fixture
def folder(tmp_path):
    docs = tmp_path / "notes"
    docs.mkdir()
    (docs / "gannet.txt").write_text("The gannet nests on the north stack.\n")
    (docs / "empty.txt").write_text("\n")
    return docs


def waited(client, name: str, until, seconds: float = 20.0) -> dict:
    """GET /v1/indexes/NAME until ``until(view)`` holds."""
    deadline = time.monotonic() + seconds
    while True:
        view = client.get(f"/v1/indexes/{name}").json()
        if until(view):
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


def idle(view: dict) -> bool:
    return view["ready"] and view["progress"] is None and not view["pending"]


def titles(client, index: str, question: str) -> list[str]:
    found = client.post("/v1/search", json={"index": index, "question": question, "top_k": 1})
    assert found.status_code == 200, found.text
    return [r["title"] for r in found.json()["results"]]


def test_a_watched_folder_is_listed_with_its_files_and_failures_and_a_dropped_file_becomes_searchable(
        fixed, folder, word_rankers, cache):
    with served(indexes={"fixed": fixed}, watch={"notes": str(folder)}) as c:
        view = waited(c, "notes", idle)
        listed = c.get("/v1/indexes").json()
        assert [i["name"] for i in listed] == ["fixed", "notes"] and listed[1] == view
        assert listed[0] == {"name": "fixed", "kind": "fixed", "folder": None, "ready": True, "documents": 4,
                             "files": None, "pending": [], "last_update": None, "failed": [], "skipped": [],
                             "progress": None, "error": None, "updates": 0}
        assert view["kind"] == "watched" and view["folder"] == str(folder.resolve())
        assert view["files"] == [{"name": "gannet.txt", "documents": 1}] and view["documents"] == 1
        assert view["failed"] == [{"name": "empty.txt", "reason": "empty.txt is empty or whitespace only; pass a "
                                                                  "file with the text to answer from"}]
        assert view["last_update"]["added"] == 1 and view["error"] is None
        assert (watched_index_dir("notes", folder) / "manifest.json").is_file()
        assert watched_index_dir("notes", folder).is_relative_to(cache)
        assert titles(c, "notes", "Where does the gannet nest?") == ["gannet.txt"]
        retriever = c.app.state.service.retrievers["notes"]

        (folder / "cormorant.txt").write_text("A cormorant dries its wings on the quay.\n")
        view = waited(c, "notes", lambda v: idle(v) and len(v["files"]) == 2)
        assert view["last_update"]["files_read"] == ["cormorant.txt"] and view["updates"] == 2
        assert titles(c, "notes", "Where does the cormorant dry its wings?") == ["cormorant.txt"]
        assert c.app.state.service.retrievers["notes"] is not retriever  # the new index's
        assert titles(c, "fixed", "Where was Martha Quill born?") == ["Port Ellis"]


def test_an_unknown_index_is_404_in_one_line(fixed):
    with served(indexes={"fixed": fixed}) as c:
        for path in ("/v1/indexes/harbour", "/v1/indexes/harbour/events"):
            r = c.get(path)
            assert r.status_code == 404 and r.json() == {"detail": "no index 'harbour'; this server has: fixed"}


def test_a_watched_folder_with_nothing_indexed_yet_is_listed_and_its_search_says_when(tmp_path):
    (tmp_path / "empty").mkdir()
    with served(watch={"notes": str(tmp_path / "empty")}) as c:
        view = waited(c, "notes", lambda v: v["updates"] == 0 and v["progress"] is None and v["files"] == [])
        assert not view["ready"] and view["error"] is None
        r = c.post("/v1/search", json={"index": "notes", "question": "Where?"})
        assert r.status_code == 503 and "GET /v1/indexes/notes" in r.json()["detail"]


def test_status_events_of_a_fixed_index_are_one_and_a_watched_folder_streams_its_updates(fixed, folder):
    with served(indexes={"fixed": fixed}) as c:
        r = c.get("/v1/indexes/fixed/events")
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.text.startswith("event: status\ndata: ") and r.text.count("event: status") == 1
    settings = Settings(light="fake:light", strong="fake:strong", prefill=False, watch={"notes": str(folder)})
    with registered("fake:light", FakeLLM(reply)), registered("fake:strong", FakeLLM(reply)), \
            LiveServer(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as client:
        waited(client, "notes", idle)
        seen = []
        with client.stream("GET", "/v1/indexes/notes/events") as events:
            for line in events.iter_lines():
                if not line.startswith("data: "):
                    continue
                seen.append(json.loads(line.removeprefix("data: ")))
                if len(seen) == 1:
                    (folder / "heron.txt").write_text("A heron fishes below the mill.\n")
                if any(f["name"] == "heron.txt" for f in seen[-1]["files"] or []):
                    break
    assert seen[0]["files"] == [{"name": "gannet.txt", "documents": 1}]
    assert any(view["pending"] == ["heron.txt"] for view in seen)  # noticed, before it was read
    assert seen[-1]["last_update"]["files_read"] == ["heron.txt"]


def test_serve_refuses_a_bad_watch_in_one_line_before_any_model_loads(tmp_path, fixed, folder):
    one_line(invoke("serve", "--watch", f"notes={tmp_path / 'missing'}"), "is not a folder")
    one_line(invoke("serve", "--watch", str(folder)), "write it as NAME=DIR")
    one_line(invoke("serve", "--index", f"notes={fixed}", "--watch", f"notes={folder}"),
             "notes names an --index index already")
    one_line(invoke("serve", "--watch", f"a/b={folder}"), "name it with letters, digits")
    assert not (tmp_path / "cache").exists()


def test_mcp_list_indexes_gives_what_get_v1_indexes_gives(fixed, tmp_path):
    pytest.importorskip("mcp", reason="needs the [mcp] extra")
    import anyio
    from mcp import Client

    from ragfunnel.serve.mcp_tools import ToolState, build_server

    with served(indexes={"fixed": fixed}) as c:
        listed = c.get("/v1/indexes").json()
    state = ToolState(root=tmp_path, indexes={"fixed": Path(fixed)})

    async def main():
        async with Client(build_server(state)) as client:
            return await client.call_tool("list_indexes", {})

    try:
        result = anyio.run(main)
    finally:
        state.close()
    assert not result.is_error, result.content
    assert result.structured_content["result"] == listed
