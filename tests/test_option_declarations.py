"""Each option of each method is declared once, in its configuration (ragfunnel.methods.config), and every front
end is generated from it: the command line, the request options of serve and the OpenAI endpoint, and MCP. The
settings outside the methods (an index's, the reader's limits, the server's) are declared the same way
(ragfunnel.declared), their flags generated, and no declared default is written a second time."""

from __future__ import annotations

import ast
import typing
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from ragfunnel.corpus.index_manifest import IndexConfig
from ragfunnel.declared import options_of_config, setting
from ragfunnel.documents import ReadLimits
from ragfunnel.methods import CONTEXT_METHODS, REGISTRY, Registered, config_of, make_method, options_of
from ragfunnel.methods.config import RetrievalConfig
from ragfunnel.methods.order_preserving import OrderPreservingRAG
from ragfunnel.serve.settings import Settings

SRC = Path(__file__).resolve().parents[1] / "src" / "ragfunnel"
# Command-line options that share a name with a method's option but are something else, and why.
NOT_A_METHOD_OPTION = {
    ("cli/scale.py", "--documents"): "a grid of k values to run, not one",
    ("cli/scale.py", "--shots"): "a grid of m values to run, not one",
    ("cli/scale.py", "--iterations"): "a grid of n values to run, not one",
    ("cli/scale.py", "--demonstrations"): "the grid's demonstrations file, read by the grid, not by one method",
    ("cli/scale.py", "--task"): "the grid's task",
    ("cli/funnel.py", "--seed"): "the cross-encoder's training seed, not the drafts' sampling seed",
    ("cli/ask.py", "--task"): "the question's task, a field of each front end's own",
    ("cli/evaluate.py", "--task"): "the dataset's task, a field of each front end's own",
    ("cli/scale.py", "--budget"): "the planner's effective-context budget L_max, not a method's",
    ("cli/main.py", "--top-k"): "search: the passages to return, not the drafts' top-k sampling",
    ("serve/request_bodies.py", "top_k"): "search: the passages to return, not the drafts' top-k sampling",
    ("serve/mcp_tools.py", "top_k"): "search: the passages to return, not the drafts' top-k sampling",
    ("serve/openai_compat.py", "temperature"): "the OpenAI wire format's own field",
    ("serve/openai_compat.py", "top_p"): "the OpenAI wire format's own field",
    ("serve/openai_compat.py", "max_tokens"): "the OpenAI wire format's own field",
    ("serve/openai_compat.py", "seed"): "the OpenAI wire format's own field",
}


def every_option() -> dict[str, set[str]]:
    """Option name -> the methods that take it (over a context or an index)."""
    found: dict[str, set[str]] = {}
    for name, entry in REGISTRY.items():
        for registered in filter(None, (entry, entry.over_index)):
            for opt in options_of_config(registered.config):
                if opt.spec.front_end:
                    found.setdefault(opt.name, set()).add(name)
    return found


def mcp_schema() -> dict:
    pytest.importorskip("mcp", reason="needs the [mcp] extra")
    import anyio

    from ragfunnel.serve.mcp_tools import ToolState, build_server

    server = build_server(ToolState(root=Path.cwd()))
    tools = anyio.run(server.list_tools)
    return next(t for t in tools if t.name == "answer").input_schema


def where_each_option_appears() -> dict[str, list[str]]:
    from ragfunnel.cli.ask import ask
    from ragfunnel.cli.evaluate import eval_command
    from ragfunnel.serve.options import client_options

    ask_params = {p.name for p in ask.params}
    eval_params = {p.name for p in eval_command.params}
    mcp = str(mcp_schema())
    table: dict[str, list[str]] = {}
    for name, methods in every_option().items():
        places = []
        places += ["ask"] if name in ask_params else []
        places += ["eval"] if name in eval_params else []
        places += ["serve"] if any(name in client_options(m) for m in methods) else []
        places += ["mcp"] if f"'{name}'" in mcp else []
        table[name] = places
    return table


def test_every_option_appears_in_every_front_end_that_may_set_it():
    operator = {o.name for c in {e.config for e in REGISTRY.values()} for o in options_of_config(c)
                if o.spec.operator_only}
    table = where_each_option_appears()
    print("\n".join(f"{name:20} {', '.join(places)}" for name, places in sorted(table.items())))
    for name, places in table.items():
        expected = ["ask", "eval"] if name in operator else ["ask", "eval", "serve", "mcp"]
        if name not in operator and not any(name in options_of(m) for m in CONTEXT_METHODS):
            expected = ["ask", "eval", "serve"]  # MCP answers over documents: the context methods' options
        assert places == expected, f"{name} appears in {places}, expected {expected}"


def _click_flags(tree: ast.AST) -> list[tuple[str, int]]:
    flags = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "option"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            flags.append((node.args[0].value.split("/")[0], node.lineno))
    return flags


def test_no_option_is_declared_a_second_time():
    """Outside the configurations, nothing declares a method's option again: no click option spelled by hand, no
    pydantic field, no tool parameter, no method keyword."""
    names = set(every_option()) | {"task"}
    flags = {"--" + n.replace("_", "-") for n in names}
    again = []
    for path in SRC.rglob("*.py"):
        where = str(path.relative_to(SRC))
        if where == "methods/config.py":
            continue
        tree = ast.parse(path.read_text())
        again += [f"{where}:{line} {flag}" for flag, line in _click_flags(tree)
                  if flag in flags and (where, flag) not in NOT_A_METHOD_OPTION]
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "BaseModel" for b in node.bases):
                again += [f"{where}:{item.lineno} {item.target.id}" for item in node.body
                          if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                          and item.target.id in names - {"task"}
                          and (where, item.target.id) not in NOT_A_METHOD_OPTION]
            if isinstance(node, ast.FunctionDef) and node.name == "__init__" and where.startswith("methods/"):
                again += [f"{where}:{node.lineno} {a.arg}" for a in node.args.args + node.args.kwonlyargs
                          if a.arg in names]
            if where == "serve/mcp_tools.py" and isinstance(node, ast.AsyncFunctionDef):
                again += [f"{where}:{node.lineno} {a.arg}" for a in node.args.args + node.args.kwonlyargs
                          if a.arg in names and (where, a.arg) not in NOT_A_METHOD_OPTION]
    assert not again, "declared again outside methods/config.py:\n" + "\n".join(sorted(again))


@dataclass(frozen=True)
class WithANewOption(RetrievalConfig):
    novelty: int = setting(3, "A new option, for this test.", ge=1, le=9)


def test_a_new_field_is_a_new_option_in_all_four_front_ends(monkeypatch):
    from ragfunnel.cli.common import method_options
    from ragfunnel.errors import ConfigError
    from ragfunnel.serve.options import checked_options, client_model

    monkeypatch.setitem(REGISTRY, "op", Registered(OrderPreservingRAG, WithANewOption, "context", "A test method."))
    client_model.cache_clear()
    try:
        probe = method_options(click.command()(lambda **given: None))
        flag = next(p for p in probe.params if p.name == "novelty")
        assert flag.opts == ["--novelty"] and "A new option" in flag.help and "[default: 3]" in flag.help
        assert "novelty" in client_model("op").model_fields
        with pytest.raises(ConfigError) as refused:
            checked_options("op", {"novelty": 10})
        assert refused.value.spelled(lambda n: f"options.{n}") == "options.novelty must be between 1 and 9, got 10"
        assert "'novelty'" in str(mcp_schema())
        assert make_method("op", novelty=4).config.novelty == 4
        assert config_of("op") is WithANewOption
    finally:
        client_model.cache_clear()


# Settings outside the methods, and the commands whose flags are generated from them (None: every field).
DECLARED_FLAGS = [
    ("index", IndexConfig, None),
    ("index", ReadLimits, None),
    ("ask", ReadLimits, None),
    ("serve", ReadLimits, None),
    ("mcp", ReadLimits, None),
    ("serve", Settings, ("host", "port", "light", "strong", "token", "queue", "deadline", "max_body_mb",
                         "cors_origins", "prefill", "indexes", "allowed_hosts", "watch")),
    ("mcp", Settings, ("light", "strong")),
]


def _bounds(kind: click.ParamType) -> tuple:
    return (kind.min, kind.max, kind.min_open) if isinstance(kind, click.IntRange | click.FloatRange) else ()


@pytest.mark.parametrize("command, config, names", DECLARED_FLAGS,
                         ids=[f"{c}-{config.__name__}" for c, config, _ in DECLARED_FLAGS])
def test_the_flags_of_declared_settings_are_generated_from_their_fields(command, config, names):
    from ragfunnel.cli.main import main

    params = {p.name: p for p in main.commands[command].params}
    context = click.Context(main.commands[command])
    for opt in options_of_config(config):
        if names is not None and opt.name not in names:
            continue
        flag, spec = params[opt.name], opt.spec
        assert spec.help.split(".")[0][1:] in flag.help, (command, opt.name)
        if bool in opt.kinds:  # a switch that changes its default: --flat, --no-prefill
            switch = "--" + "no-" * opt.default + opt.name.replace("_", "-")
            assert flag.is_flag and flag.opts == [switch] and flag.get_default(context) is opt.default, opt.name
        elif flag.multiple:
            assert {list, dict} & set(opt.kinds), (command, opt.name)
        else:
            assert flag.default == opt.default and flag.show_default == (opt.default is not None), (command, opt.name)
            low = spec.gt if spec.gt is not None else spec.ge
            wanted = (low, spec.le, spec.gt is not None) if low is not None or spec.le is not None else ()
            assert _bounds(flag.type) == wanted, (command, opt.name)
            assert opt.choices is None or tuple(flag.type.choices) == opt.choices, (command, opt.name)


# Names in src/ that hold another setting than the declared field of the same name, and why.
NOT_THE_SAME_SETTING = {
    ("corpus/funnel.py", "passage_words"): "the funnel's passages, cut when a question is asked, not the index's",
}


def distinctive_defaults() -> dict[str, set[object]]:
    """Field name -> the declared defaults of the settings outside the methods that are distinctive literals: a
    number other than 0 and 1, or a non-empty string (a 0, a 1, True or None written again could mean anything)."""
    found: dict[str, set[object]] = {}
    for config in (IndexConfig, ReadLimits, Settings):
        for opt in options_of_config(config):
            value = opt.default
            number = isinstance(value, int | float) and not isinstance(value, bool) and value not in (0, 1)
            if number or (isinstance(value, str) and value):
                found.setdefault(opt.name, set()).add(value)
    return found


def literal_defaults(tree: ast.AST) -> list[tuple[str, object, int]]:
    """(name, value, line) of every default written as a literal: a click option's ``default=`` (named by its
    destination, else its flag), a class field's value, a function parameter's default."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "option":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            dest = next((n for n in names if not n.startswith("-")), None)
            name = dest or (names[0].split("/")[0].lstrip("-").replace("-", "_") if names else "")
            found += [(name, kw.value.value, node.lineno) for kw in node.keywords
                      if kw.arg == "default" and isinstance(kw.value, ast.Constant)]
        elif isinstance(node, ast.ClassDef):
            found += [(item.target.id, item.value.value, item.lineno) for item in node.body
                      if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                      and isinstance(item.value, ast.Constant)]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            positional = node.args.posonlyargs + node.args.args
            pairs = [*zip(positional[len(positional) - len(node.args.defaults):], node.args.defaults, strict=True),
                     *zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)]
            found += [(arg.arg, default.value, default.lineno) for arg, default in pairs
                      if isinstance(default, ast.Constant)]
    return found


def test_no_declared_default_is_written_again():
    """A setting's default lives in its field: no click option, class field or parameter of the same name
    writes the same literal again (a second copy that would not follow a change to the first)."""
    defaults = distinctive_defaults()
    again = []
    for path in SRC.rglob("*.py"):
        where = str(path.relative_to(SRC))
        for name, value, line in literal_defaults(ast.parse(path.read_text())):
            if (not isinstance(value, bool) and value in defaults.get(name, ())
                    and (where, name) not in NOT_THE_SAME_SETTING):
                again.append(f"{where}:{line} {name} = {value!r}")
    assert not again, "a declared default written again:\n" + "\n".join(sorted(again))


def test_the_index_takes_the_faiss_kinds_faiss_search_builds():
    from ragfunnel.corpus.index_manifest import FaissChoice
    from ragfunnel.retrieve.faiss_search import CHOICES

    assert typing.get_args(FaissChoice) == CHOICES
