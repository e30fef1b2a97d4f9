"""Every method by name, of two kinds.

A *context* method answers from a long text handed over with each question (``ask --context``);
a *corpus* method is built on a corpus index and answers from what it retrieves there
(``ask --index``). Each takes one configuration (:mod:`ragfunnel.methods.config`) and two models;
:func:`make_method` builds both kinds from keyword options, checked by the configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.errors import ConfigError, option
from ragfunnel.llm import DEFAULT_LIGHT, DEFAULT_STRONG
from ragfunnel.llm.base import LLM
from ragfunnel.methods.auto import Auto
from ragfunnel.methods.config import (
    AnswerConfig,
    AutoConfig,
    Config,
    CorpusFBConfig,
    DragConfig,
    FBConfig,
    ForwardOnlyConfig,
    FunnelConfig,
    IterDragConfig,
    RetrievalConfig,
    StepwiseConfig,
    options_of_config,
)
from ragfunnel.methods.corpus_fb import CorpusFBRAG
from ragfunnel.methods.drag import DRAG
from ragfunnel.methods.fbrag import FBRAG
from ragfunnel.methods.funnel import FunnelRAG
from ragfunnel.methods.iterdrag import IterDRAG
from ragfunnel.methods.long_context import LongContext
from ragfunnel.methods.order_preserving import OrderPreservingRAG
from ragfunnel.methods.self_route import SelfRoute
from ragfunnel.methods.stepwise import Stepwise
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


@dataclass(frozen=True)
class Registered:
    """A method by name: its class, its configuration, and what it becomes over a corpus index (``fb``)."""

    cls: type
    config: type[Config]
    kind: Literal["context", "corpus"]
    over_index: Registered | None = None


_CORPUS_FB = Registered(CorpusFBRAG, CorpusFBConfig, "corpus")
REGISTRY: dict[str, Registered] = {
    "auto": Registered(Auto, AutoConfig, "context"),
    "fb-f": Registered(FBRAG, ForwardOnlyConfig, "context"),
    "fb": Registered(FBRAG, FBConfig, "context", over_index=_CORPUS_FB),
    "op": Registered(OrderPreservingRAG, RetrievalConfig, "context"),
    "vanilla": Registered(VanillaRAG, RetrievalConfig, "context"),
    "self-route": Registered(SelfRoute, RetrievalConfig, "context"),
    "lc": Registered(LongContext, AnswerConfig, "context"),
    "stepwise": Registered(Stepwise, StepwiseConfig, "context"),
    "funnel": Registered(FunnelRAG, FunnelConfig, "corpus"),
    "drag": Registered(DRAG, DragConfig, "corpus"),
    "iterdrag": Registered(IterDRAG, IterDragConfig, "corpus"),
}
METHODS = tuple(REGISTRY)
CONTEXT_METHODS = tuple(name for name, entry in REGISTRY.items() if entry.kind == "context")
CORPUS_METHODS = tuple(name for name, entry in REGISTRY.items() if entry.kind == "corpus")
OVER_INDEX = tuple(name for name, entry in REGISTRY.items() if entry.over_index is not None)
MODELS = ("light", "strong")  # what every method takes beside its configuration
DEFAULT_METHOD = "auto"  # over a context
DEFAULT_CORPUS_METHOD = "funnel"


def registered(name: str, *, over_index: bool = False) -> Registered:
    """Method ``name``'s entry (over a corpus index: what it becomes there)."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}")
    entry = REGISTRY[name]
    return entry.over_index if over_index and entry.over_index is not None else entry


def method_kind(name: str) -> Literal["context", "corpus"]:
    """Whether method ``name`` reads a provided context or searches a corpus index."""
    return registered(name).kind


def config_of(name: str, *, over_index: bool = False) -> type[Config]:
    """The configuration method ``name`` takes, over a context or (``over_index``) over a corpus index."""
    return registered(name, over_index=over_index).config


def options_of(name: str, *, over_index: bool = False) -> list[str]:
    """The keyword options method ``name`` accepts (its configuration's fields), over a context or
    (``over_index``) over a corpus index."""
    return [o.name for o in options_of_config(config_of(name, over_index=over_index))]


def check_source(name: str, *, index: CorpusIndex | str | Path | None) -> None:
    """Refuse a corpus method without an index, and a context method given one."""
    kind = method_kind(name)
    if kind == "context" and index is not None and name not in OVER_INDEX:
        raise ConfigError(f"{option('index')} answers with {option('method')} "
                          f"{', '.join([*CORPUS_METHODS, *OVER_INDEX])}; "
                          f"{name} reads {option('context')}")
    if kind == "corpus" and index is None:
        raise ConfigError(f"method {name} answers from a corpus index; pass {option('index')} instead of "
                          f"{option('context')}")


def check_options(name: str, options: dict[str, Any], *, over_index: bool = False,
                  allowed: list[str] | None = None) -> None:
    """Refuse an option method ``name`` does not take (``allowed``: those a front end lets a client set),
    listing those it does; one that belongs to a corpus method says so."""
    takes = options_of(name, over_index=over_index) if allowed is None else allowed
    unknown = sorted(set(options) - set(takes))
    if not unknown:
        return
    if method_kind(name) == "context" and not over_index:
        corpus = [m for m in CORPUS_METHODS if unknown[0] in options_of(m)]
        if corpus:
            raise ConfigError(f"{option(unknown[0])} goes with {option('index')} and {option('method')} "
                              f"{' or '.join(corpus)}")
    where = " over an index" if over_index and method_kind(name) == "context" else ""
    raise ConfigError(f"{option('method')} {name}{where} does not take {', '.join(map(option, unknown))}; it takes "
                      f"{', '.join(map(option, takes))}")


def make_method(name: str, *, index: CorpusIndex | str | Path | None = None, light: str | LLM = DEFAULT_LIGHT,
                strong: str | LLM = DEFAULT_STRONG, **options: Any) -> Method:
    """Build method ``name`` from keyword ``options`` (its configuration's fields): a corpus method on ``index``
    (a :class:`CorpusIndex` or its directory), a context method without one. An option it does not take is an
    error that lists the ones it does."""
    check_source(name, index=index)
    check_options(name, options, over_index=index is not None)
    entry = registered(name, over_index=index is not None)
    config = entry.config(**options)
    if entry.kind == "corpus":
        return entry.cls(config, light=light, strong=strong, index=index)
    return entry.cls(config, light=light, strong=strong)


__all__ = ["METHODS", "REGISTRY", "CONTEXT_METHODS", "CORPUS_METHODS", "DEFAULT_METHOD", "DEFAULT_CORPUS_METHOD",
           "OVER_INDEX", "MODELS", "ContextMethod", "CorpusMethod", "Method", "Registered", "check_source", "config_of",
           "check_options", "make_method", "method_kind", "options_of", "registered",
           "AnswerConfig", "AutoConfig", "Config", "CorpusFBConfig", "DragConfig", "FBConfig", "ForwardOnlyConfig",
           "FunnelConfig", "IterDragConfig", "RetrievalConfig", "StepwiseConfig",
           "Auto", "DRAG", "FBRAG", "FunnelRAG", "IterDRAG", "LongContext", "OrderPreservingRAG", "SelfRoute",
           "Stepwise", "VanillaRAG"]
