"""``ragfunnel mcp`` over stdio, driven by the MCP SDK's own client: tools listed, calls, refusals."""

from __future__ import annotations

import os

import anyio
import pytest

pytest.importorskip("mcp", reason="needs the [mcp] extra")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from tests.helpers.cli import RAGFUNNEL  # noqa: E402
from tests.helpers.mcp_client import error_text, payload, session_run  # noqa: E402

TINY = "bundled:smollm2-135m"


@pytest.fixture
def root(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "harbour.md").write_text("# Harbour\n\nThe ferry to Gull Rock leaves at nine.\n")
    (tmp_path / "secret.txt").write_text("outside the root")
    (tmp_path / "root" / "escape.txt").symlink_to(tmp_path / "secret.txt")
    return tmp_path / "root"


def test_tools_are_listed_and_paths_outside_the_root_refused(root):
    async def calls(session):
        tools = {t.name: t for t in (await session.list_tools()).tools}
        added = await session.call_tool("add_document", {"path": "harbour.md"})
        listed = await session.call_tool("list_documents", {})
        outside = await session.call_tool("add_document", {"path": "../secret.txt"})
        absolute = await session.call_tool("answer", {"question": "Q?", "path": str(root.parent / "secret.txt")})
        symlink = await session.call_tool("add_document", {"path": "escape.txt"})
        bad_type = await session.call_tool("search", {"index": "x", "query": "q", "top_k": "many"})
        two_sources = await session.call_tool("answer", {"question": "Q?", "path": "harbour.md", "text": "t"})
        return tools, added, listed, outside, absolute, symlink, bad_type, two_sources

    tools, added, listed, outside, absolute, symlink, bad_type, two_sources = session_run(root, calls)
    assert set(tools) == {"answer", "search", "add_document", "list_documents", "list_indexes",
                          "remove_document"}
    assert {"question", "path", "text", "document_id", "method", "options"} <= set(
        tools["answer"].input_schema["properties"])
    options = tools["answer"].input_schema["properties"]["options"]["anyOf"][0]
    assert "max_seconds" in options["properties"] and options["additionalProperties"] is False
    doc = payload(added)
    assert doc["files"] == [{"name": "harbour.md", "format": "markdown", "pages": 0}]
    assert [d["document_id"] for d in payload(listed)] == [doc["document_id"]]
    for refused in (outside, absolute, symlink):
        assert "outside the root" in error_text(refused)
    assert "top_k" in error_text(bad_type)
    assert "exactly one of path, text and document_id" in error_text(two_sources)


@pytest.mark.model
def test_an_answer_with_citations_and_progress(root):
    progress = []

    async def calls(session):
        async def on_progress(done, total, message):
            progress.append(message)

        return await session.call_tool("answer", {"question": "When does the ferry to Gull Rock leave?",
                                                  "path": "harbour.md", "method": "op"},
                                       progress_callback=on_progress)

    result = payload(session_run(root, calls, "--light", TINY, "--strong", TINY))
    assert result["answer"] and result["method"] == "op" and result["supported"] in (True, False)
    # the tiny model's answer is cited where a passage states it, else the answer says no passage does
    assert ({c["file"] for c in result["citations"]} == {"harbour.md"} if result["citations"]
            else result["citation_note"] == "no passage read states this answer")
    assert progress and progress[-1].endswith("done")


def test_streamable_http_needs_its_token(root):
    import socket
    import subprocess
    import time

    import httpx
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from tests.helpers.network import free_port

    port = free_port()
    proc = subprocess.Popen([RAGFUNNEL, "mcp", "--root", str(root), "--http", str(port), "--token", "tok"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/v1/mcp"
        assert httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).status_code == 401

        async def main():
            async with httpx2.AsyncClient(headers={"Authorization": "Bearer tok"}) as http, \
                    streamable_http_client(url, http_client=http) as streams, \
                    ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                return {t.name for t in (await session.list_tools()).tools}

        assert anyio.run(main) == {"answer", "search", "add_document", "list_documents", "list_indexes",
                                   "remove_document"}
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_server_says_its_name_and_version(root):
    from ragfunnel.version import __version__

    async def main():
        params = StdioServerParameters(command=RAGFUNNEL, args=["mcp", "--root", str(root)], env=dict(os.environ))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            return await session.initialize()

    info = anyio.run(main).server_info
    assert (info.name, info.version) == ("ragfunnel", __version__) and __version__
