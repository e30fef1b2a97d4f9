"""MCP over stdio that answers every line it reads.

The SDK's own stdio transport drops a line its parser refuses and answers nothing, so a client whose
request held a lone surrogate (JSON's ``"\\ud800"``) or nesting past the parser's limit waits forever.
This transport reads the lines itself. A lone surrogate is replaced by U+FFFD, as the HTTP service does,
and the call goes on. A line nested past :data:`~ragfunnel.bounded.MAX_JSON_DEPTH` or longer than
:data:`MAX_LINE_BYTES` is refused before it is parsed, and one that is not a JSON-RPC message gets the
matching JSON-RPC error: with the request's id when a flat scan finds it, so the client can match it, else
with id null. Good messages go to the SDK server's run loop over memory streams, as the SDK's transport
feeds them.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import MCPServer
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from ragfunnel.bounded import MAX_JSON_DEPTH, json_depth_exceeds
from ragfunnel.text.hygiene import replace_lone_surrogates, warn_replaced

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 8 * 1024 * 1024  # one message; the HTTP transport's body limit (serve_http) is the same
_SKIP_PIECE = 1 << 20  # the rest of an over-long line is read and dropped this much at a time
# A JSON string (escapes included) or a bracket: enough to walk a message's top level without parsing it.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_COLON = re.compile(r"\s*:\s*")
_DECODER = json.JSONDecoder()


class Refused(Exception):
    """A line that is no message the server can take, with the JSON-RPC error that answers it."""

    def __init__(self, code: int, message: str, request_id: str | int | None):
        super().__init__(message)
        request_id = replace_lone_surrogates(request_id)[0]  # the reply must encode as UTF-8
        self.reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


def run_stdio(server: MCPServer) -> None:
    """Serve ``server`` over this process's stdin and stdout until stdin ends."""
    anyio.run(_serve, server)


async def _serve(server: MCPServer) -> None:
    # The SDK has no public way to run a server over given streams; its own in-memory client uses this too.
    lowlevel = server._lowlevel_server
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_writes, to_client = anyio.create_memory_object_stream[SessionMessage](0)
    with _wire() as (wire_in, wire_out):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read_lines, wire_in, to_server, server_writes.clone())
            tasks.start_soon(_write_lines, to_client, wire_out)
            async with server_writes:
                await lowlevel.run(server_reads, server_writes, lowlevel.create_initialization_options())


@contextmanager
def _wire() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """stdin and stdout for the protocol alone. While serving, fd 0 reads the null device and fd 1 writes to
    stderr, so a library or child process that reads or prints misses the wire (as in the SDK's transport);
    both are restored on exit."""
    sys.stdout.flush()
    wire_in, wire_out = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) for fd in (0, 1))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        # Never closed: a worker thread may still be blocked reading the wire when serving ends, and a
        # closed descriptor's number could be reused under it.
        yield os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False)
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)


async def _read_lines(wire_in: BinaryIO, to_server: MemoryObjectSendStream[SessionMessage | Exception],
                      replies: MemoryObjectSendStream[SessionMessage]) -> None:
    async with to_server, replies:
        while line := await _readline(wire_in, MAX_LINE_BYTES + 1):
            too_long = len(line) > MAX_LINE_BYTES and not line.endswith(b"\n")
            if too_long:
                await _skip_rest_of_line(wire_in)
            elif not line.strip():
                continue  # nothing was asked
            try:
                message = parse_message(line, too_long=too_long)
            except Refused as refused:
                log.warning("refused an MCP message: %s", refused)
                await replies.send(SessionMessage(refused.reply))
            else:
                await to_server.send(SessionMessage(message))


async def _readline(wire_in: BinaryIO, limit: int) -> bytes:
    return await anyio.to_thread.run_sync(wire_in.readline, limit, abandon_on_cancel=True)


async def _skip_rest_of_line(wire_in: BinaryIO) -> None:
    while (piece := await _readline(wire_in, _SKIP_PIECE)) and not piece.endswith(b"\n"):
        pass


async def _write_lines(to_client: MemoryObjectReceiveStream[SessionMessage], wire_out: BinaryIO) -> None:
    async with to_client:
        async for outgoing in to_client:
            line = outgoing.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
            await anyio.to_thread.run_sync(_write, wire_out, line.encode("utf-8"))


def _write(wire_out: BinaryIO, data: bytes) -> None:
    wire_out.write(data)
    wire_out.flush()


def parse_message(line: bytes, *, too_long: bool = False) -> JSONRPCMessage:
    """The JSON-RPC message on ``line`` (lone surrogates replaced), or :class:`Refused` with the error that
    answers it. ``too_long``: the line is only the first :data:`MAX_LINE_BYTES` of one."""
    text = line.decode("utf-8", "replace")  # as the SDK's transport reads: a bad byte becomes U+FFFD
    if too_long:
        raise Refused(INVALID_REQUEST, f"message over the limit of {MAX_LINE_BYTES:,} bytes; send less text "
                      "(or a path under the root)", _top_level_id(text))
    if json_depth_exceeds(text):
        raise Refused(INVALID_REQUEST, f"message nested deeper than {MAX_JSON_DEPTH} levels",
                      _top_level_id(text))
    try:
        return jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError:
        pass  # a lone surrogate, which this parser refuses, or no JSON-RPC message: the slower path tells
    try:
        data = json.loads(text)
    except ValueError as e:
        raise Refused(PARSE_ERROR, f"not JSON ({getattr(e, 'msg', e)})", _top_level_id(text)) from None
    cleaned, replaced = replace_lone_surrogates(data)
    try:
        message = jsonrpc_message_adapter.validate_json(json.dumps(cleaned, ensure_ascii=False), by_name=False)
    except ValidationError as e:
        problem = e.errors()[0]["msg"] if e.errors() else "invalid"
        raise Refused(INVALID_REQUEST, f"not a JSON-RPC 2.0 message ({problem})", _top_level_id(text)) from None
    warn_replaced("an MCP message", replaced)
    return message


def _top_level_id(text: str) -> str | int | None:
    """The ``id`` member of a message's outermost object, found by a flat scan (no parse, so any depth or
    damage after it is harmless); None when there is none to find."""
    depth = 0
    for token in _TOKEN.finditer(text):
        found = token.group()
        if found in ("[", "{"):
            depth += 1
        elif found in ("]", "}"):
            depth -= 1
        elif depth == 1 and found == '"id"' and (colon := _COLON.match(text, token.end())):
            return _scalar_at(text, colon.end())
    return None


def _scalar_at(text: str, start: int) -> str | int | None:
    """A string or integer id at ``start``; never decodes a list or object (which could nest without end)."""
    if text[start:start + 1] in ("", "[", "{"):
        return None
    try:
        value, _ = _DECODER.raw_decode(text, start)
    except ValueError:
        return None
    return value if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)) else None
