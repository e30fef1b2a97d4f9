"""``ragfunnel mcp`` over stdio answers every line: a message the SDK's parser refuses (a lone surrogate,
deep nesting, text that is not JSON) gets a reply, never silence. Raw JSON-RPC lines are written to the
server's stdin and its replies read by a thread, so a reply that never comes fails the test in seconds."""

from __future__ import annotations

import json
import queue
import subprocess
import threading

import pytest

pytest.importorskip("mcp", reason="needs the [mcp] extra")
from ragfunnel.serve.mcp_stdio import MAX_LINE_BYTES, Refused, parse_message  # noqa: E402
from tests.helpers.cli import RAGFUNNEL  # noqa: E402

REPLY_SECONDS = 20
DEEP_ARGUMENT = "[" * 5000 + "]" * 5000


class StdioClient:
    """A ``ragfunnel mcp`` process spoken to in raw lines; replies are read by a thread into a queue."""

    def __init__(self, root):
        self.process = subprocess.Popen([RAGFUNNEL, "mcp", "--root", str(root)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.replies: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.replies.put(line)

    def send(self, line: str | bytes) -> None:
        self.process.stdin.write((line.encode() if isinstance(line, str) else line) + b"\n")
        self.process.stdin.flush()

    def reply(self) -> dict:
        try:
            return json.loads(self.replies.get(timeout=REPLY_SECONDS))
        except queue.Empty:
            pytest.fail(f"no reply within {REPLY_SECONDS} s")

    def call(self, request_id: int, method: str, params: dict | None = None) -> dict:
        self.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}))
        return self.reply()

    def initialize(self) -> None:
        started = self.call(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                              "clientInfo": {"name": "test", "version": "1"}})
        assert started["result"]["serverInfo"]["name"] == "ragfunnel"
        self.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def close(self) -> tuple[int, str]:
        self.process.stdin.close()
        code = self.process.wait(timeout=30)
        return code, self.process.stderr.read().decode()


@pytest.fixture
def client(tmp_path):
    (tmp_path / "harbour.md").write_text("# Harbour\n\nThe ferry to Gull Rock leaves at nine.\n")
    client = StdioClient(tmp_path)
    yield client
    if client.process.poll() is None:
        client.process.kill()
        client.process.wait()


def tool_call(request_id: int, arguments: str) -> str:
    """A tools/call line written by hand, so it can hold what json.dumps would never write."""
    return (f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", '
            f'"params": {{"name": "add_document", "arguments": {arguments}}}}}')


def test_every_message_gets_a_reply_and_the_server_keeps_serving(client, tmp_path):
    client.initialize()
    client.send(tool_call(1, r'{"path": "harbour\ud800.md"}'))  # a lone surrogate: replaced, and the call made
    surrogate = client.reply()
    assert surrogate["id"] == 1 and surrogate["result"]["isError"]
    assert "'harbour\ufffd.md' does not exist under the root" in surrogate["result"]["content"][0]["text"]

    client.send(tool_call(2, f'{{"path": {DEEP_ARGUMENT}}}'))  # 5,000 deep: refused unparsed, its id found
    assert client.reply() == {"jsonrpc": "2.0", "id": 2,
                              "error": {"code": -32600, "message": "message nested deeper than 64 levels"}}

    client.send(tool_call(3, '{"path": "harbour.md"'))  # cut short: not JSON
    not_json = client.reply()
    assert not_json["id"] == 3 and not_json["error"]["code"] == -32700

    client.send('{"jsonrpc": "2.0", "id": 4}')  # JSON, but no JSON-RPC message
    assert client.reply()["error"]["code"] == -32600

    client.send(b"\xff\xfe not even text")
    garbage = client.reply()
    assert garbage["id"] is None and garbage["error"]["code"] == -32700

    added = client.call(5, "tools/call", {"name": "add_document", "arguments": {"path": "harbour.md"}})
    assert not added["result"]["isError"]
    assert {t["name"] for t in client.call(6, "tools/list")["result"]["tools"]} == {
        "answer", "search", "add_document", "list_documents", "list_indexes", "remove_document"}
    code, stderr = client.close()
    assert code == 0, stderr
    assert "held 1 lone surrogate(s)" in stderr and "refused an MCP message" in stderr


def test_a_line_over_the_limit_is_refused_and_the_next_one_answered(client):
    client.initialize()
    client.send(tool_call(1, json.dumps({"path": "x" * (MAX_LINE_BYTES + 10)})))
    refused = client.reply()
    assert refused["id"] == 1 and refused["error"]["code"] == -32600 and "over the limit" in refused["error"]["message"]
    assert "tools" in client.call(2, "tools/list")["result"]


@pytest.mark.parametrize(("line", "code", "request_id"), [
    (b'{"jsonrpc": "2.0", "id": "a", "method": "x", "params": ' + DEEP_ARGUMENT.encode() + b"}", -32600, "a"),
    (b'{"params": {"id": 9}, "id": 7, "jsonrpc": "2.0", "method": ', -32700, 7),  # the top-level id, not a nested one
    (b'{"jsonrpc": "2.0", "id": 1.5, "result": "x"}', -32600, None),  # an id that is no id
    (b'{"jsonrpc": "1.0", "id": 8, "method": "x"}', -32600, 8),
    (b'["id", 3]', -32600, None),  # a string "id" inside a list is no member
])
def test_a_refused_line_is_answered_with_the_id_it_carries_when_there_is_one(line, code, request_id):
    with pytest.raises(Refused) as refused:
        parse_message(line)
    reply = refused.value.reply
    assert reply.error.code == code and reply.id == request_id


def test_a_lone_surrogate_anywhere_is_replaced_and_a_pair_kept():
    line = rb'{"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"\udc00": ["\ud800", "\ud83d\ude00"]}}'
    message = parse_message(line)
    assert message.params == {"\ufffd": ["\ufffd", "\U0001f600"]}
