"""Settings declared once: a configuration is a dataclass whose every field carries its default, type, bounds,
unit and help (:func:`setting`), and which checks them when it is built (:class:`Config`).

The methods' options (``ragfunnel.methods.config``), the index's settings (``ragfunnel.corpus.index_manifest``),
the reader's limits (``ragfunnel.documents.limits``) and the server's (``ragfunnel.serve.settings``) are declared
this way, and the front ends are generated from the fields (:func:`options_of_config`): the command line's
options (``ragfunnel.cli.common``), the request options of ``serve``, the OpenAI endpoint and MCP
(``ragfunnel.serve.options``). An error names the field (:func:`ragfunnel.errors.option`), and each front end
spells it its own way.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from functools import cache
from typing import Any, Literal

from ragfunnel.errors import ConfigError, option


@dataclass(frozen=True)
class Spec:
    """What a front end needs to know of one option besides its name, type and default."""

    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    unit: str = ""
    operator_only: bool = False  # names a model, a file or a URL: never set by a remote client
    default_text: str | None = None  # the default in words, where it is computed from other options
    metavar: str | None = None
    front_end: bool = True  # False: each front end sets it from a field of its own (the question's task)
    # How :meth:`Config.resolved` computes the field when it is left None, from the fields declared before it;
    # its docstring is the default in words.
    computed: Callable[[Any], Any] | None = None


def setting(default: Any, help: str, **spec: Any) -> Any:
    """A configuration field: its default and its :class:`Spec` (a ``computed`` rule's docstring is its
    ``default_text``)."""
    rule = spec.get("computed")
    if rule is not None:
        spec.setdefault("default_text", " ".join((rule.__doc__ or "").split()))
    return field(default=default, metadata={"spec": Spec(help=help, **spec)})


def setting_made_by(factory: Callable[[], Any], help: str, **spec: Any) -> Any:
    """A configuration field whose default is a new mutable value each time (a list, a dict), and its
    :class:`Spec`."""
    return field(default_factory=factory, metadata={"spec": Spec(help=help, **spec)})


def default_changed(config: type, name: str, default: Any) -> Any:
    """Field ``name`` of ``config`` again, with another default: the same option (one :class:`Spec`), as a
    method that starts elsewhere sees it."""
    return field(default=default, metadata=config.__dataclass_fields__[name].metadata)


@dataclass(frozen=True)
class Option:
    """One field of a configuration, as the front ends read it."""

    name: str
    kinds: tuple[type, ...]  # the accepted Python types, None's aside (str, int, float, bool, list ...)
    optional: bool  # None is accepted (the default is computed)
    choices: tuple[str, ...] | None
    default: Any
    spec: Spec


def _kinds(hint: Any) -> tuple[tuple[type, ...], bool, tuple[str, ...] | None]:
    """The types a field hint allows (``list`` for ``list[str]``), whether it allows None, and its choices if it
    is a Literal."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    optional = type(None) in args
    kinds: list[type] = []
    choices = None
    for arg in args:
        if typing.get_origin(arg) is Literal:
            choices = tuple(typing.get_args(arg))
            kinds.append(str)
        elif isinstance(typing.get_origin(arg), type):
            kinds.append(typing.get_origin(arg))
        elif isinstance(arg, type) and arg is not type(None):
            kinds.append(arg)
    return tuple(kinds), optional, choices


class Config:
    """Validation shared by every configuration: types, bounds and choices, then the configuration's own
    :meth:`check` of options that depend on each other."""

    def __post_init__(self) -> None:
        for opt in options_of_config(type(self)):
            value = getattr(self, opt.name)
            checked = _checked(opt, value)
            if checked is not value:
                object.__setattr__(self, opt.name, checked)
        self.check()

    def check(self) -> None:
        """Rules between options; a configuration that has them overrides this."""

    def resolved(self: C) -> C:
        """This configuration with every computed default worked out: each field left None that declares a
        ``computed`` rule gets the rule's value, in declaration order (a rule reads the fields before it
        resolved)."""
        done = self
        for opt in options_of_config(type(self)):
            if opt.spec.computed is not None and getattr(done, opt.name) is None:
                done = dataclasses.replace(done, **{opt.name: opt.spec.computed(done)})
        return done

    def narrowed(self, config: type[C]) -> C:
        """This configuration's values for the fields ``config`` shares with it (an ``auto`` ladder's rungs)."""
        mine = {f.name for f in fields(self)}  # type: ignore[arg-type]
        return config(**{f.name: getattr(self, f.name) for f in fields(config) if f.name in mine})

    def changed(self: C, **values: Any) -> C:
        return dataclasses.replace(self, **values)  # type: ignore[type-var]

    def not_at_default(self) -> list[tuple[str, Any]]:
        """The fields set to something other than their default, with their values, in declaration order."""
        return [(opt.name, getattr(self, opt.name)) for opt in options_of_config(type(self))
                if getattr(self, opt.name) != opt.default]


C = typing.TypeVar("C", bound=Config)


def _checked(opt: Option, value: Any) -> Any:
    """``value`` if it is of ``opt``'s type, bounds and choices (an int where a float goes becomes a float)."""
    if value is None and opt.optional:
        return value
    simple = {str, int, float, bool}
    if not set(opt.kinds) <= simple:  # Python objects (a loaded model, demonstrations, a list) are the caller's
        return value
    if float in opt.kinds and type(value) is int:
        value = float(value)
    if type(value) not in opt.kinds:
        wanted = " or ".join(k.__name__ for k in opt.kinds) + (" or None" if opt.optional else "")
        raise ConfigError(f"{option(opt.name)} must be {wanted}, got {value!r}")
    if opt.choices is not None and value not in opt.choices:
        raise ConfigError(f"{option(opt.name)} must be one of {', '.join(opt.choices)}, got {value!r}")
    _check_bounds(opt, value)
    return value


def _check_bounds(opt: Option, value: Any) -> None:
    spec = opt.spec
    if type(value) not in (int, float):
        return
    too_low = (spec.ge is not None and value < spec.ge) or (spec.gt is not None and value <= spec.gt)
    if too_low or (spec.le is not None and value > spec.le):
        raise ConfigError(f"{option(opt.name)} must be {bounds_text(spec)}, got {value!r}")


def bounds_text(spec: Spec) -> str:
    """``between 1 and 64``, ``at least 0``, ``above 0`` ..."""
    low = spec.gt if spec.gt is not None else spec.ge
    if low is not None and spec.le is not None and spec.gt is None:
        return f"between {_number(low)} and {_number(spec.le)}"
    parts = []
    if low is not None:
        parts.append(f"{'above' if spec.gt is not None else 'at least'} {_number(low)}")
    if spec.le is not None:
        parts.append(f"at most {_number(spec.le)}")
    return " and ".join(parts) or "a number"


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else str(value)


@cache
def options_of_config(config: type) -> tuple[Option, ...]:
    """The fields of ``config`` with their types and specs, in declaration order."""
    hints = typing.get_type_hints(config)
    found = []
    for f in fields(config):
        kinds, optional, choices = _kinds(hints[f.name])
        default = f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]
        found.append(Option(f.name, kinds, optional, choices, default, f.metadata["spec"]))
    return tuple(found)
