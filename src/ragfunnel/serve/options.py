"""What a client may set per request, and what only the operator may.

Every option comes from the method's configuration (:mod:`ragfunnel.methods.config`), which validates it:
``"budget": "huge"`` or ``"samples": "5"`` is refused with 422 naming ``options.budget``. A field marked
``operator_only`` (a model, a file, a directory, an index or a URL) is never set by a request: one that
could would make the server read a file or call a URL of the client's choosing with the operator's API key,
so only ``ragfunnel serve``'s command line sets them. The question's ``task`` is the request's own field.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from ragfunnel.declared import Option, options_of_config
from ragfunnel.errors import ConfigError, option
from ragfunnel.methods import check_options, config_of, registered

OPTION_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")  # how every option of every method is named

# option -> where the operator sets it, beyond the methods' operator-only fields
OPERATOR_SET: dict[str, str] = {
    "light": "serve --light",
    "strong": "serve --strong",
    "index": "serve --index NAME=DIR, then the request's index field",
}


def operator_only(method: str, *, over_index: bool = False) -> list[str]:
    """The options of ``method`` only the operator sets: its models, files, indexes and URLs."""
    config = options_of_config(config_of(method, over_index=over_index))
    return [*OPERATOR_SET, *(o.name for o in config if o.spec.operator_only)]


def _client_fields(method: str, *, over_index: bool = False) -> dict[str, Option]:
    """The fields of ``method``'s configuration a remote client may set."""
    config = config_of(method, over_index=over_index)
    return {o.name: o for o in options_of_config(config) if o.spec.front_end and not o.spec.operator_only}


def _client_field(opt: Option, *, optional: bool = False) -> tuple[Any, Any]:
    """A configuration field as a pydantic field: its type, bounds and help (``optional``: None by default)."""
    kind: Any = Literal[opt.choices] if opt.choices else opt.kinds[0]  # type: ignore[valid-type]
    spec = opt.spec
    description = spec.help + (f" Default: {spec.default_text}." if spec.default_text else "")
    bounds = {k: v for k, v in (("ge", spec.ge), ("gt", spec.gt), ("le", spec.le)) if v is not None}
    if optional or opt.optional:
        kind = kind | None
    return kind, Field(None if optional else opt.default, description=description, **bounds)


@cache
def client_model(method: str, *, over_index: bool = False) -> type[BaseModel]:
    """What a request may set for ``method`` (for the schema and ``GET /v1/methods``; the configuration itself
    validates)."""
    fields = {name: _client_field(o) for name, o in _client_fields(method, over_index=over_index).items()}
    name = config_of(method, over_index=over_index).__name__.removesuffix("Config") + "Options"
    return create_model(name, __config__=ConfigDict(extra="forbid", strict=True), **fields)


def client_options(method: str, *, over_index: bool = False) -> list[str]:
    """The options a request may set for ``method``."""
    return sorted(client_model(method, over_index=over_index).model_fields)


def checked_options(method: str, options: dict[str, Any], *, over_index: bool = False) -> dict[str, Any]:
    """The options a client set for ``method``, validated by the method's configuration; a ConfigError names the
    first bad one."""
    registered(method)
    allowed = client_options(method, over_index=over_index)
    for name in options:
        if not OPTION_NAME.fullmatch(name):  # no option is named so; the name is echoed cut, never whole
            raise ConfigError(f"{option('method')} {method} does not take {echoed(name)}; it takes "
                              f"{', '.join(map(option, allowed))}")
    operator = operator_only(method, over_index=over_index)
    for name in sorted(set(options) & set(operator)):
        where = OPERATOR_SET.get(name, "the server's command line")
        raise ConfigError(f"options.{name} is set by the server's operator ({where}), not per request")
    if "task" in options:
        raise ConfigError("option 'task' goes in the request's own 'task' field, not in its options")
    check_options(method, options, over_index=over_index, allowed=allowed)
    config = config_of(method, over_index=over_index)
    config = config(**options)  # validation, once, where every front end's is
    return {name: getattr(config, name) for name in options if options[name] is not None}


def describe_errors(errors: list[Any], *, prefix: str = "") -> str:
    """Pydantic's first complaint in one line: which field, what is wrong, and what came (shortened)."""
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"]) or "the value"
    given = first.get("input")
    shown = "" if given is None and first["type"] == "missing" else f" (got {echoed(given)})"
    return f"{prefix}{where!r}: {first['msg']}{shown}"


def echoed(value: Any, limit: int = 60) -> str:
    """A client's value as an error shows it: its repr, cut to ``limit`` characters, so an error never grows
    with what the client sent."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"
