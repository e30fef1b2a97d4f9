"""Every method by name, of two kinds.

A *context* method answers from a long text handed over with each question (``ask --context``);
a *corpus* method is built on a corpus index and answers from what it retrieves there
(``ask --index``). :func:`make_method` builds both and checks their options the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.errors import ConfigError
from ragfunnel.methods.auto import Auto
from ragfunnel.methods.corpus_fb import CorpusFBRAG
from ragfunnel.methods.drag import DRAG
from ragfunnel.methods.fbrag import FBRAG
from ragfunnel.methods.funnel import FunnelRAG
from ragfunnel.methods.iterdrag import IterDRAG
from ragfunnel.methods.long_context import LongContext
from ragfunnel.methods.order_preserving import OrderPreservingRAG
from ragfunnel.methods.self_route import SelfRoute
from ragfunnel.methods.vanilla import VanillaRAG
from ragfunnel.types import Prediction


class ContextMethod(Protocol):
    """Answers from the text given with each question; ``choices`` are the options of a multiple-choice one."""

    name: str

    def run(self, question: str, context: str, *, choices: list[str] | None = None) -> Prediction: ...


class CorpusMethod(Protocol):
    """Answers from the corpus index it was built on; ``choices`` are the options of a multiple-choice
    question, which a method that answers open questions only (DRAG, IterDRAG) refuses."""

    name: str

    def run(self, question: str, *, choices: list[str] | None = None) -> Prediction: ...


Method = ContextMethod | CorpusMethod


def _fb(**options: Any) -> FBRAG:
    return FBRAG(**{"eta_forward": 0.5, "eta_backward": 0.5, **options})


def _fb_f(**options: Any) -> FBRAG:
    return FBRAG(**{"eta_forward": 1.0, "eta_backward": 0.0, **options})


# name -> (what builds it, the class whose keyword options it takes)
_CONTEXT: dict[str, tuple[Callable[..., ContextMethod], type]] = {
    "auto": (Auto, Auto),
    "fb-f": (_fb_f, FBRAG),
    "fb": (_fb, FBRAG),
    "op": (OrderPreservingRAG, OrderPreservingRAG),
    "vanilla": (VanillaRAG, VanillaRAG),
    "self-route": (SelfRoute, SelfRoute),
    "lc": (LongContext, LongContext),
}
_CORPUS: dict[str, tuple[Callable[..., CorpusMethod], type]] = {
    "funnel": (FunnelRAG, FunnelRAG),
    "drag": (DRAG, DRAG),
    "iterdrag": (IterDRAG, IterDRAG),
}
# Context methods that also answer over a corpus index, and what they become there.
_OVER_INDEX: dict[str, type] = {"fb": CorpusFBRAG}
METHODS: dict[str, tuple[Callable[..., Method], type]] = {**_CONTEXT, **_CORPUS}
CONTEXT_METHODS = tuple(_CONTEXT)
CORPUS_METHODS = tuple(_CORPUS)
DEFAULT_METHOD = "auto"  # over a context
DEFAULT_CORPUS_METHOD = "funnel"


def _registered(name: str) -> tuple[Callable[..., Method], type]:
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}")
    return METHODS[name]


def method_kind(name: str) -> Literal["context", "corpus"]:
    """Whether method ``name`` reads a provided context or searches a corpus index."""
    _registered(name)
    return "corpus" if name in _CORPUS else "context"


def options_of(name: str, *, over_index: bool = False) -> list[str]:
    """The keyword options method ``name`` accepts (a corpus method's ``index`` is not one of them), over a
    context or (``over_index``) over a corpus index."""
    cls = _OVER_INDEX[name] if over_index and name in _OVER_INDEX else _registered(name)[1]
    return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "index")]


def check_source(name: str, *, index: CorpusIndex | str | Path | None) -> None:
    """Refuse a corpus method without an index, and a context method given one."""
    kind = method_kind(name)
    if kind == "context" and index is not None and name not in _OVER_INDEX:
        raise ConfigError(f"--index answers with --method {', '.join([*CORPUS_METHODS, *_OVER_INDEX])}; "
                          f"{name} reads a --context")
    if kind == "corpus" and index is None:
        raise ConfigError(f"--method {name} answers from a corpus index; pass --index DIR instead of --context")


def make_method(name: str, *, index: CorpusIndex | str | Path | None = None, **options: Any) -> Method:
    """Build method ``name``: a corpus method on ``index`` (a :class:`CorpusIndex` or its directory), a
    context method without one. Options it does not take are an error that lists the ones it does."""
    check_source(name, index=index)
    valid = options_of(name, over_index=index is not None)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        where = " over an index" if index is not None and method_kind(name) == "context" else ""
        raise ConfigError(f"method {name}{where} does not take {', '.join(unknown)}; it takes {', '.join(valid)}")
    if index is None:
        return _registered(name)[0](**options)
    factory = _OVER_INDEX.get(name) or _registered(name)[0]
    return factory(index=index, **options)


__all__ = ["METHODS", "CONTEXT_METHODS", "CORPUS_METHODS", "DEFAULT_METHOD", "DEFAULT_CORPUS_METHOD",
           "ContextMethod", "CorpusMethod", "Method", "check_source", "make_method", "method_kind", "options_of",
           "Auto", "DRAG", "FBRAG", "FunnelRAG", "IterDRAG", "LongContext", "OrderPreservingRAG", "SelfRoute",
           "VanillaRAG"]
