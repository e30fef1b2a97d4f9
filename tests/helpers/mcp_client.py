"""``ragfunnel mcp`` over stdio, driven by the MCP SDK's own client."""

from __future__ import annotations

import json
import os

import anyio
import pytest

pytest.importorskip("mcp", reason="needs the [mcp] extra")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from tests.helpers.cli import RAGFUNNEL  # noqa: E402


def session_run(root, calls, *args):
    """Start ``ragfunnel mcp --root ROOT`` over stdio and run ``calls(session)`` against it."""
    params = StdioServerParameters(command=RAGFUNNEL, args=["mcp", "--root", str(root), *args],
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})

    async def main():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await calls(session)

    return anyio.run(main)


def payload(result):
    assert not result.is_error, result.content
    return result.structured_content.get("result", result.structured_content) if result.structured_content else \
        json.loads(result.content[0].text)


def error_text(result):
    assert result.is_error
    return result.content[0].text
