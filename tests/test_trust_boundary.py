"""A file never chooses where the operator's credentials go: an index, a calibration file or a run directory that
names a server is never called with OPENAI_API_KEY unless the operator named that same server.

Each test crafts the hostile file against a listener that records every request it gets, and the listener must
stay silent; where the operator trusts the server by name, the same listener proves it would have heard."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner

from ragfunnel.cli.main import main
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_manifest import MANIFEST, IndexConfig, Manifest
from ragfunnel.errors import ConfigError
from ragfunnel.types import Document
from tests.fake_openai import Handler

SECRET = "sk-operator-secret"
DOCS = [Document("gull", "Gull Rock Light", "Gull Rock Light stands on a granite islet off Tarrow Point."),
        Document("ada", "Ada Penhallow", "Ada Penhallow kept the Gull Rock lamp from 1931 until 1958.")]


@contextmanager
def recording_server() -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """An OpenAI-compatible server in a thread: its ``/v1`` URL, and each request's path and Authorization."""
    heard: list[tuple[str, str | None]] = []

    class Recording(Handler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            heard.append((self.path, self.headers.get("Authorization")))
            super().do_POST()

        def do_GET(self) -> None:  # noqa: N802
            heard.append((self.path, self.headers.get("Authorization")))
            super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", heard
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def listener():
    """Where a hostile file points."""
    with recording_server() as server:
        yield server


@pytest.fixture
def operators_server():
    """The server the operator chose."""
    with recording_server() as server:
        yield server


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


def crafted_index(tmp_path, url: str, operators_url: str):
    """An index of DOCS embedded by the operator's server, whose manifest, edited as an attacker would and
    re-signed, says its vectors came from the server at ``url`` (identity and dimension kept, as the issue's
    probe did)."""
    root = tmp_path / "idx"
    build_index(DOCS, root, IndexConfig(flat=True, embed_documents=True, embedder=f"openai:{operators_url}#e"),
                source="test")
    data = json.loads((root / MANIFEST).read_text())
    data["embedder"]["spec"] = f"openai:{url}#e"
    (root / MANIFEST).write_text(json.dumps(Manifest.from_json(data).to_json()))
    return root


def test_an_index_naming_a_server_is_refused_in_one_line_naming_the_flag(tmp_path, listener, operators_server,
                                                                         secret):
    url, heard = listener
    root = crafted_index(tmp_path, url, operators_server[0])
    with pytest.raises(ConfigError, match="remote_embedder") as refused:
        CorpusIndex(root)
    assert "\n" not in str(refused.value) and f"openai:{url}#e" in str(refused.value)
    with pytest.raises(ConfigError, match="remote_embedder"):  # another server named is no trust in this one
        CorpusIndex(root, remote_embedder="openai:http://127.0.0.1:9/v1#e")
    for command in (["search", str(root), "Who kept the lamp?"],
                    ["search", str(root), "Who kept the lamp?", "--flat"],
                    ["ask", "Who kept the lamp?", "--index", str(root)]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 1, result.output
        line = result.output.strip()
        assert line.startswith("error:") and "--remote-embedder" in line and "\n" not in line
    assert heard == []


def test_the_server_the_operator_names_gets_the_queries_and_the_key(tmp_path, listener, secret):
    url, heard = listener
    root = tmp_path / "idx"
    spec = f"openai:{url}#m"
    build_index(DOCS, root, IndexConfig(flat=True, embedder=spec), source="test")
    heard.clear()
    result = CliRunner().invoke(main, ["search", str(root), "Who kept the lamp?", "--flat",
                                       "--remote-embedder", f"openai:{url}/#m"])  # a trailing slash is the same server
    assert result.exit_code == 0, result.output
    assert heard == [("/v1/embeddings", f"Bearer {SECRET}")]


def test_mcp_search_and_serve_refuse_an_index_naming_a_server(tmp_path, listener, operators_server, secret):
    import asyncio

    from mcp.server.mcpserver.exceptions import ToolError

    from ragfunnel.serve.answering import load
    from ragfunnel.serve.mcp_tools import ToolState, build_server
    from ragfunnel.serve.settings import Settings

    url, heard = listener
    root = crafted_index(tmp_path, url, operators_server[0])
    server = build_server(ToolState(root=tmp_path.resolve(), settings=Settings(light="fake", strong="fake"),
                                    indexes={"named": root}))
    for index in ("idx", "named"):  # a folder under the root, and an index the server was started with
        with pytest.raises(ToolError, match="pass `ragfunnel mcp --remote-embedder`"):
            asyncio.run(server.call_tool("search", {"index": index, "query": "Who kept the lamp?"}))
    with pytest.raises(ConfigError, match="remote_embedder"):  # serve opens its indexes before any model loads
        load(Settings(light="nonexistent:model", strong="nonexistent:model", indexes={"idx": str(root)}))
    with socket.socket() as probe:  # a free port: serve takes its port before it opens anything
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = CliRunner().invoke(main, ["serve", "--index", f"idx={root}", "--port", str(port)])
    assert result.exit_code == 1 and "--remote-embedder" in result.output.strip().splitlines()[-1], result.output
    assert heard == []


def test_a_calibration_file_and_a_run_directory_naming_a_server_send_it_nothing(tmp_path, listener, operators_server,
                                                                               secret):
    """Neither file is a place a backend is chosen: a calibration naming a server, and a run whose recorded
    configuration names one, are read, the operator's server answers, and the listener hears nothing."""
    url, heard = listener
    operators_url, answered = operators_server
    strong = f"openai:{operators_url}#m"
    context = tmp_path / "notes.txt"
    context.write_text("Gull Rock Light stands on a granite islet. Ada Penhallow kept its lamp from 1931.")
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps({"models": {}, "fingerprints": {"strong": f"openai:{url}#x"},
                                       "strong": f"openai:{url}#x", "endpoint": url}))
    CliRunner().invoke(main, ["ask", "Who kept the lamp?", "--context", str(context), "--method", "lc",
                              "--strong", strong, "--calibration", str(calibration)])
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"options": {"strong": f"openai:{url}#x", "light": f"openai:{url}#x"},
                                                 "models": {f"openai:{url}#x": "x"}}))
    dataset = tmp_path / "data.jsonl"
    dataset.write_text(json.dumps({"id": "1", "question": "Who kept the lamp?", "answers": ["Ada"],
                                   "context": context.read_text()}) + "\n")
    for command in (["eval", str(dataset), "--methods", "lc", "--out", str(run), "--strong", strong],
                    ["eval", str(dataset), "--methods", "lc", "--out", str(tmp_path / "run2"), "--strong", strong],
                    ["report", str(tmp_path / "run2")],
                    ["calibrate", str(tmp_path / "run2"), "--out", str(tmp_path / "fitted.json")]):
        CliRunner().invoke(main, command)
    assert heard == [] and answered  # the operator's server was asked, the file's never
