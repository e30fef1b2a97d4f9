"""MCP's tools in process, over scripted models (no model loads): answers and searches run as jobs of the
service's queue, and an answer's options pass the service's checks."""

from __future__ import annotations

import threading

import anyio
import pytest

pytest.importorskip("mcp", reason="needs the [mcp] extra")
from mcp import Client  # noqa: E402

from ragfunnel.errors import InputError  # noqa: E402
from ragfunnel.llm import FakeLLM  # noqa: E402
from ragfunnel.llm.registry import registered  # noqa: E402
from ragfunnel.serve.mcp_tools import ToolState, build_server  # noqa: E402
from ragfunnel.serve.settings import Settings  # noqa: E402

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


def tools_state(root, indexes=None, **settings) -> ToolState:
    """The tools' state over ``root``, answering with ``fake:light`` and ``fake:strong``, ``settings`` changed."""
    return ToolState(root=root, settings=Settings(light="fake:light", strong="fake:strong", **settings),
                     indexes=indexes or {})


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
    from tests.helpers.corpora import corpus
    from tests.helpers.rankers import WordOverlap

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
    assert state._service is not None  # the searches went through the service's queue


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


def test_a_question_over_the_services_limit_is_refused_before_any_job(root):
    from ragfunnel.serve.settings import QUESTION_CHARS

    too_long = "why " * (QUESTION_CHARS // 4) + "?"

    async def script(client):
        answer = await client.call_tool("answer", {"question": too_long, "text": TEXT, "method": "lc"})
        search = await client.call_tool("search", {"index": "lights", "query": too_long})
        within = await client.call_tool("answer", {"question": "When?" + " " * (QUESTION_CHARS - 5), "text": TEXT,
                                                   "method": "lc"})
        return answer, search, within

    state = tools_state(root, indexes={"lights": root})
    answer, search, within = calls(state, script)
    for refused in (answer, search):
        text = refused.content[0].text
        assert refused.is_error and f"{len(too_long):,} characters, over the limit of {QUESTION_CHARS:,}" in text
        assert len(text) < 500  # the question is not echoed back
    assert not within.is_error, within.content


def test_mcp_and_serve_refuse_a_long_question_in_the_same_words(root):
    pytest.importorskip("fastapi", reason="needs the [serve] extra")
    from tests.helpers.serve import served

    question = "q" * 20_001
    with served() as c:
        http = c.post("/v1/answer", json={"question": question, "text": TEXT}).json()["detail"]

    async def script(client):
        return await client.call_tool("answer", {"question": question, "text": TEXT})

    tool = calls(tools_state(root), script).content[0].text.removeprefix("Error executing tool answer: ")
    assert tool.startswith("the question is 20,001 characters") and tool in http  # serve adds the field's name


def test_values_a_client_names_are_cut_in_the_errors_that_echo_them(root):
    huge = "x" * 100_000

    async def script(client):
        return [await client.call_tool(tool, arguments) for tool, arguments in (
            ("answer", {"question": "When?", "document_id": huge}),
            ("answer", {"question": "When?", "text": TEXT, "method": huge}),
            ("answer", {"question": "When?", "text": TEXT, "options": {huge: 1}}),
            ("answer", {"question": "When?", "path": huge}),  # longer than the file system takes
            ("answer", {"question": "When?", "path": huge[:200]}),
            ("add_document", {"path": "../" + huge[:200]}),
            ("remove_document", {"document_id": huge}),
            ("search", {"index": huge, "query": "q"}),
        )]

    for refused in calls(tools_state(root), script):
        assert refused.is_error and len(refused.content[0].text) < 600, refused.content[0].text[:300]
        assert "xxx…" in refused.content[0].text and "\x1e" not in refused.content[0].text


def test_a_method_option_is_spelled_as_the_answer_tool_takes_it_even_when_search_has_an_argument_of_its_name(root):
    async def script(client):
        return await client.call_tool("answer", {"question": "When?", "text": TEXT, "method": "auto",
                                                 "options": {"bogus": 1}})  # auto takes top_k

    text = calls(tools_state(root), script).content[0].text
    assert "options.top_k" in text and " top_k" not in text.replace("options.top_k", "")


def test_a_file_over_the_size_limit_says_what_a_client_can_do(root):
    from ragfunnel.documents import ReadLimits

    (root / "big.txt").write_text("Gulls nest on the rock. " * 130_000)  # 3 MB

    async def script(client):
        return [await client.call_tool("add_document", {"path": "big.txt"}),
                await client.call_tool("answer", {"question": "Where?", "path": "big.txt"})]

    for refused in calls(tools_state(root, read_limits=ReadLimits(max_document_mb=1)), script):
        text = refused.content[0].text
        assert refused.is_error and "big.txt is 3 MB, over the 1 MB limit" in text
        assert "raise it with `ragfunnel mcp --max-document-mb` (the server's operator sets it), or send a " \
               "document within the limit" in text
        assert "options.max_document_mb" not in text


def test_every_read_limit_is_spelled_as_a_flag_ragfunnel_mcp_has():
    from dataclasses import fields

    from ragfunnel.cli.mcp import mcp
    from ragfunnel.documents import ReadLimits
    from ragfunnel.serve.mcp_tools import tool_spelling

    flags = {opt for param in mcp.params for opt in param.opts}
    spell = tool_spelling(set(), set())
    for limit in fields(ReadLimits):
        flag = spell(limit.name).split("`")[1].removeprefix("ragfunnel mcp ")
        assert flag in flags, limit.name


def test_a_path_holding_a_nul_says_so(tmp_path):
    with pytest.raises(InputError, match="holds a NUL character"):
        ToolState(root=tmp_path).inside("notes\x00.txt")


def test_answers_with_the_same_method_and_options_share_one_kept_method(root, monkeypatch):
    from ragfunnel.serve import answering

    built, make_method = [], answering.make_method

    def counted(name, **options):
        built.append(name)
        return make_method(name, **options)

    monkeypatch.setattr(answering, "make_method", counted)

    async def script(client):
        return [await client.call_tool("answer", {"question": "When?", "text": TEXT, "method": "op",
                                                  "options": options})
                for options in ({"budget": 400}, {"budget": 400}, {"budget": 300})]

    state = tools_state(root)
    answers = calls(state, script)
    assert all(not a.is_error and a.structured_content["answer"] == "nine" for a in answers)
    assert built == ["op", "op"]  # once for budget 400, once for 300
    assert len(state.service().methods) == 2


def test_a_session_that_only_lists_the_tools_makes_no_service(root):
    async def script(client):
        return await client.list_tools()

    state = tools_state(root)
    assert len(calls(state, script).tools) == 6
    assert state._service is None  # no worker started, no model resolved
