"""MCP's tools in process, over scripted models (no model loads): answers and searches run as jobs of the
service's queue, and an answer's options pass the service's checks."""

from __future__ import annotations

import threading

import anyio
import pytest

pytest.importorskip("mcp", reason="needs the [mcp] extra")
from mcp import Client  # noqa: E402

from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.mcp_tools import ToolState, build_server  # noqa: E402

TEXT = "The ferry to Gull Rock leaves at nine."


def reply(prompt: str, i: int) -> str:
    return "Rationale: the ferry leaves at nine.\nAnswer: nine" if "Rationale:" in prompt else "nine"


@pytest.fixture
def root(tmp_path):
    (tmp_path / "harbour.md").write_text(f"# Harbour\n\n{TEXT}\n")
    return tmp_path


def calls(state: ToolState, script, *, strong=reply):
    """Run ``script(client)`` against the tools of ``state``, over models ``fake:light`` and ``fake:strong``."""
    async def main():
        async with Client(build_server(state)) as client:
            return await script(client)

    with registered("fake:light", FakeLLM(reply)), registered("fake:strong", FakeLLM(strong)):
        try:
            return anyio.run(main)
        finally:
            state.close()


def tools_state(root, **given) -> ToolState:
    return ToolState(root=root, light="fake:light", strong="fake:strong", **given)


def test_an_answer_takes_checked_options_and_runs_as_a_job_with_its_stages_as_progress(root):
    progress = []

    async def script(client):
        async def on_progress(done, total, message):
            progress.append(message)

        answered = await client.call_tool("answer", {"question": "When does the ferry leave?", "path": "harbour.md",
                                                     "method": "op", "options": {"budget": 400}},
                                          progress_callback=on_progress)
        refusals = [await client.call_tool("answer", {"question": "When?", "text": TEXT, **arguments})
                    for arguments in ({"method": "op", "options": {"samples": 3}},
                                      {"method": "op", "options": {"strong": "gguf:/etc/passwd"}},
                                      {"method": "auto", "options": {"budget": "huge"}},
                                      {"method": "op", "options": {"max_seconds": 5}},
                                      {"method": "funnel"})]
        within = await client.call_tool("answer", {"question": "When?", "text": TEXT,
                                                   "options": {"max_seconds": 1000}})
        return answered, refusals, within

    state = tools_state(root)
    answered, refusals, within = calls(state, script)
    assert not answered.is_error, answered.content
    assert answered.structured_content["answer"] == "nine" and answered.structured_content["method"] == "op"
    assert progress and progress[-1].endswith("done")
    samples, operator, typed, not_auto, corpus = (r.content[0].text for r in refusals)
    assert all(r.is_error for r in refusals)
    assert "does not take options.samples" in samples
    assert "set by the server's operator" in operator
    assert "options.budget" in typed
    assert "does not take options.max_seconds" in not_auto
    assert "unknown method 'funnel' for a document" in corpus
    assert not within.is_error, within.content


def held_model():
    """A model reply that says it has begun (``entered``) and answers "nine" once ``release`` is set."""
    entered, release = threading.Event(), threading.Event()

    def held(prompt, i):
        entered.set()
        release.wait(30)
        return "nine"

    return entered, release, held


def test_calls_share_one_bounded_queue_a_full_one_is_refused_and_a_deadline_holds(root):
    entered, release, held = held_model()

    async def script(client):
        results = {}

        async def first():
            results["first"] = await client.call_tool("answer", {"question": "When?", "text": TEXT, "method": "lc"})

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first)
            await anyio.to_thread.run_sync(entered.wait, 30)
            results["busy"] = await client.call_tool("search", {"index": "lights", "query": "q", "top_k": 1})
            release.set()
        return results

    state = tools_state(root, queue=1, indexes={"lights": root})
    results = calls(state, script, strong=held)
    assert results["busy"].is_error and "the server is busy" in results["busy"].content[0].text
    assert not results["first"].is_error, results["first"].content


def test_an_answer_past_the_deadline_is_an_error_and_the_next_one_is_answered(root):
    release = threading.Event()

    def strong(prompt, i):
        release.wait(30)
        return "nine"

    async def script(client):
        late = await client.call_tool("answer", {"question": "When?", "text": TEXT, "method": "lc"})
        release.set()
        prompt = await client.call_tool("answer", {"question": "When?", "text": TEXT, "method": "lc"})
        return late, prompt

    late, prompt = calls(tools_state(root, deadline=2.0), script, strong=strong)
    assert late.is_error and "no result within the deadline of 2 s" in late.content[0].text
    assert not prompt.is_error and prompt.structured_content["answer"] == "nine"


def test_added_documents_are_kept_in_the_services_store(root):
    async def script(client):
        added = await client.call_tool("add_document", {"path": "harbour.md"})
        again = await client.call_tool("add_document", {"path": "harbour.md"})
        listed = await client.call_tool("list_documents", {})
        doc_id = added.structured_content["document_id"]
        answered = await client.call_tool("answer", {"question": "When?", "document_id": doc_id, "method": "lc"})
        return added, again, listed, answered

    added, again, listed, answered = calls(tools_state(root), script)
    assert added.structured_content == again.structured_content
    assert [d["document_id"] for d in listed.structured_content["result"]] == [added.structured_content["document_id"]]
    assert not answered.is_error and answered.structured_content["citations"][0]["file"] == "harbour.md"


def test_a_search_runs_as_a_job_with_its_own_size(root, monkeypatch):
    from ragfunnel import api
    from ragfunnel.corpus.index_build import build_index
    from tests.test_drag import corpus
    from tests.test_funnel import WordOverlap

    monkeypatch.setattr("ragfunnel.methods.funnel.load_pre_ranker", lambda *a, **k: WordOverlap())
    monkeypatch.setattr("ragfunnel.retrieve.attention.load_post_ranker", lambda *a, **k: WordOverlap())
    build_index(corpus(), root / "ix", source="test")
    api._funnel.cache_clear()

    async def script(client):
        sizes = [await client.call_tool("search", {"index": "lights", "query": "Where was Martha Quill born?",
                                                   "top_k": k}) for k in (1, 3)]
        too_many = await client.call_tool("search", {"index": "lights", "query": "q", "top_k": 101})
        return sizes, too_many

    state = tools_state(root, indexes={"lights": root / "ix"})
    (one, three), too_many = calls(state, script)
    api._funnel.cache_clear()
    assert [len(r.structured_content["result"]) for r in (one, three)] == [1, 3]
    assert one.structured_content["result"][0]["title"] == "Port Ellis"
    assert too_many.is_error and "top_k must be between 1 and 100" in too_many.content[0].text
    assert state._jobs is not None  # the searches went through the queue


def test_a_document_is_removed_unless_an_answer_reads_it(root):
    entered, release, held = held_model()

    async def script(client):
        doc_id = (await client.call_tool("add_document", {"path": "harbour.md"})).structured_content["document_id"]
        results = {}

        async def ask():
            results["answer"] = await client.call_tool("answer", {"question": "When?", "document_id": doc_id,
                                                                  "method": "lc"})

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(ask)
            await anyio.to_thread.run_sync(entered.wait, 30)
            results["while_read"] = await client.call_tool("remove_document", {"document_id": doc_id})
            results["listed_while_read"] = await client.call_tool("list_documents", {})
            release.set()
        results["removed"] = await client.call_tool("remove_document", {"document_id": doc_id})
        results["listed"] = await client.call_tool("list_documents", {})
        results["again"] = await client.call_tool("remove_document", {"document_id": doc_id})
        results["answer_after"] = await client.call_tool("answer", {"question": "When?", "document_id": doc_id})
        return doc_id, results

    doc_id, r = calls(tools_state(root), script, strong=held)
    assert r["while_read"].is_error and "is being answered now" in r["while_read"].content[0].text
    assert [d["document_id"] for d in r["listed_while_read"].structured_content["result"]] == [doc_id]
    assert not r["answer"].is_error and r["answer"].structured_content["answer"] == "nine"
    assert r["removed"].structured_content == {"document_id": doc_id, "removed": True}
    assert r["listed"].structured_content["result"] == []
    assert r["again"].is_error and f"no document {doc_id!r}" in r["again"].content[0].text
    assert r["answer_after"].is_error and f"no document {doc_id!r}" in r["answer_after"].content[0].text
