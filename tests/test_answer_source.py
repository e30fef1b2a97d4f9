"""An answer reads exactly one source: one check (``ragfunnel.source.Source``) behind the Python API, ``ask``,
``/v1/answer`` and MCP's ``answer``, each refusing zero or two sources with the fields named as its caller writes
them."""

from __future__ import annotations

import anyio
import pytest

import ragfunnel
from ragfunnel.errors import ConfigError
from ragfunnel.source import Source
from tests.helpers.cli import invoke

TEXT = "The ferry to Gull Rock leaves at nine."


def test_a_source_is_exactly_one_of_its_fields_and_is_refused_in_the_words_it_is_given():
    assert Source(context=TEXT, refusal="one, please").context == TEXT
    assert Source(files=[], refusal="one, please").files == []  # an empty list is given, and reads nothing
    for given in ({}, {"context": TEXT, "document": "0123"}, {"files": ["a.md"], "index": "lights"}):
        with pytest.raises(ConfigError) as refused:
            Source(**given, refusal="one, please")
        assert str(refused.value) == "one, please"


@pytest.mark.parametrize("sources", [{}, {"context": TEXT, "files": ["notes.md"]}])
def test_the_python_api_names_its_arguments(sources):
    with pytest.raises(ConfigError) as refused:
        ragfunnel.answer("When?", **sources)
    assert str(refused.value) == ("answer() reads a context (a long text), files (paths of documents or folders), "
                                  "or an index (a corpus index directory); pass exactly one")


@pytest.mark.parametrize("sources", [[], ["--context", "notes.md", "--index", "ix"]])
def test_ask_names_its_flags(sources):
    result = invoke("ask", "When?", *sources)
    assert result.exit_code == 1
    assert result.stderr == ("error: pass either --context PATH (documents to answer from) or --index DIR (a corpus "
                             "index), not both or neither\n")


@pytest.mark.parametrize("sources", [{}, {"text": TEXT, "document_id": "0123456789abcdef"}])
def test_the_http_api_names_its_fields(sources):
    pytest.importorskip("fastapi", reason="needs the [serve] extra")
    from tests.helpers.serve import served

    with served() as client:
        refused = client.post("/v1/answer", json={"question": "When?", **sources})
    assert refused.status_code == 422
    assert refused.json()["detail"] == "pass exactly one of document_id (a stored document), text, and index"


@pytest.mark.parametrize("sources", [{}, {"path": "notes.md", "text": TEXT}])
def test_the_mcp_answer_tool_names_its_arguments(tmp_path, sources):
    pytest.importorskip("mcp", reason="needs the [mcp] extra")
    from mcp.server.mcpserver.exceptions import ToolError

    from ragfunnel.serve.mcp_tools import ToolState, build_server

    state = ToolState(root=tmp_path)

    async def call():
        with pytest.raises(ToolError) as refused:
            await build_server(state).call_tool("answer", {"question": "When?", **sources})
        return str(refused.value)

    assert anyio.run(call) == "Error executing tool answer: pass exactly one of path, text and document_id"
    assert state._service is None  # refused before the service is made
