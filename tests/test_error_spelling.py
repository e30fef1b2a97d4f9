"""The library never spells a command-line flag in an error: it names the option with
:func:`ragfunnel.errors.option`, and each front end spells it (``--budget``, ``budget``, ``options.budget``).

A whole command quoted in backticks (`ragfunnel models --prepare`, `pip install --no-deps ...`) is a command
to run, not an option of the call that failed, and may keep its flags.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragfunnel import errors
from ragfunnel.cli.main import main
from ragfunnel.errors import ConfigError, InputError, RagfunnelError, option
from ragfunnel.llm import FakeLLM
from ragfunnel.llm.registry import registered

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[1] / "src" / "ragfunnel"
FRONT_END = SRC / "cli"  # the command line spells its own flags
FLAG = re.compile(r"--[a-z]")
QUOTED_COMMAND = re.compile(r"`[^`]*`")
LOG_CALLS = {"warning", "error", "exception", "critical"}
ERROR_CLASSES = {name for name, value in vars(errors).items()
                 if isinstance(value, type) and issubclass(value, RagfunnelError)}


def _text(node: ast.AST) -> str:
    """The message an expression builds, with ``{...}`` for each value filled in at run time."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(part) for part in node.values)
    if isinstance(node, ast.FormattedValue):  # a value filled in: strings inside it may be messages too
        return "{" + _text(node.value) + "}"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    return " ".join(_text(child) for child in ast.iter_child_nodes(node))


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _is_message(call: ast.Call) -> bool:
    """An error built (to raise) or a warning or error logged."""
    name = _called_name(call)
    if name.endswith("Error") or name in ERROR_CLASSES:
        return True
    return isinstance(call.func, ast.Attribute) and name in LOG_CALLS


def flags_spelled(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and _is_message(node):
            for argument in [*node.args, *(k.value for k in node.keywords)]:
                text = QUOTED_COMMAND.sub("", _text(argument))
                if match := FLAG.search(text):
                    where, around = path.relative_to(SRC.parent), text[max(0, match.start() - 30):match.end() + 30]
                    found.append(f"{where}:{argument.lineno}: ...{around}...")
    return found


def test_no_library_message_spells_a_flag():
    spelled = [line for path in sorted(SRC.rglob("*.py")) if FRONT_END not in path.parents
               for line in flags_spelled(path)]
    assert not spelled, "mark options with errors.option(name) instead:\n" + "\n".join(spelled)


def test_python_spells_an_option_by_its_name():
    error = ConfigError(f"raise {option('chunk_words')}")
    assert str(error) == "raise chunk_words"
    assert error.spelled(lambda name: "--" + name.replace("_", "-")) == "raise --chunk-words"


def test_an_unmarked_message_is_left_alone():
    assert InputError("a -- b --c").spelled(lambda name: "X") == "a -- b --c"


def refuse(prompt: str, i: int) -> str:
    """A model that refuses every prompt, naming options the way library code does."""
    raise ConfigError(f"the prompt is too long; shorten the {option('question')}, raise {option('budget')} or "
                      f"lower {option('chunk_words')}")


def test_the_command_line_spells_options_as_its_flags(tmp_path):
    context = tmp_path / "c.txt"
    context.write_text("The ferry to Gull Rock leaves at nine.")
    with registered("fake:refusing", FakeLLM(refuse)):
        result = CliRunner().invoke(main, ["ask", "When?", "--context", str(context), "--method", "lc",
                                           "--strong", "fake:refusing", "--light", "fake:refusing"])
    assert result.exit_code == 1
    assert result.stderr == ("error: the prompt is too long; shorten the QUESTION, raise --budget or lower "
                             "--chunk-words\n")


def test_the_service_spells_options_as_a_request_sets_them():
    pytest.importorskip("fastapi", reason="needs the [serve] extra")
    from fastapi.testclient import TestClient

    from ragfunnel.serve.app import Settings, create_app

    settings = Settings(light="fake:refusing", strong="fake:refusing", prefill=False)
    expected = "the prompt is too long; shorten the question, raise options.budget or lower options.chunk_words"
    body = {"question": "When?", "text": "The ferry to Gull Rock leaves at nine.", "method": "lc"}
    with registered("fake:refusing", FakeLLM(refuse)), \
            TestClient(create_app(settings), base_url="http://127.0.0.1:8000") as client:
        answered = client.post("/v1/answer", json=body)
        assert answered.status_code == 422 and answered.json()["detail"] == expected
        streamed = client.post("/v1/answer", json={**body, "stream": True})
        assert f'"detail": "{expected}"' in streamed.text


def test_an_mcp_tool_spells_its_arguments_as_they_are_and_other_options_in_options(tmp_path):
    pytest.importorskip("mcp", reason="needs the [mcp] extra")
    import anyio
    from mcp.server.mcpserver.exceptions import ToolError

    from ragfunnel.serve.mcp_tools import ToolState, build_server

    class Refusing(ToolState):
        def read(self, path):
            raise InputError(f"too big: lower {option('budget')}, or give another {option('path')}")

    async def call():
        with pytest.raises(ToolError) as refused:
            await build_server(Refusing(root=tmp_path)).call_tool("add_document", {"path": "x"})
        return str(refused.value)

    # a read limit is the operator's, spelled as its flag (tests/test_mcp_tools.py)
    assert anyio.run(call).endswith("too big: lower options.budget, or give another path")


def test_a_flag_is_found_by_its_parameter_name_else_made_from_the_name():
    import click

    from ragfunnel.cli.common import cli_spelling

    ctx = click.Context(main)
    ctx.invoked_subcommand = "index"  # as the group's context is when its subcommand fails
    spell = cli_spelling(ctx)
    assert (spell("ray_address"), spell("max_cluster_tokens"), spell("no_such_option")) == (
        "--ray", "--max-cluster-tokens", "--no-such-option")
