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
from ragfunnel.declared import options_of_config
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
    """A method by name: its class, its configuration, what it reads, the one line that describes it (``--help``,
    ``GET /v1/methods``, MCP's ``answer`` tool and the README's table say it), and what it becomes over a corpus
    index (``fb``)."""

    cls: type
    config: type[Config]
    kind: Literal["context", "corpus"]
    description: str
    over_index: Registered | None = None


_CORPUS_FB = Registered(CorpusFBRAG, CorpusFBConfig, "corpus",
                        "FB-RAG over the funnel's top documents, citing them")
REGISTRY: dict[str, Registered] = {
    "auto": Registered(Auto, AutoConfig, "context",
                       "OP-RAG first (or LC for a document the strong model already holds); with `--prefer quality`, "
                       "FB-RAG then LC while the answer is unsupported"),
    "fb-f": Registered(FBRAG, ForwardOnlyConfig, "context",
                       "FB-RAG forward only: chunks scored against the drafts alone"),
    "fb": Registered(FBRAG, FBConfig, "context",
                     "FB-RAG: chunks scored half against the question, half against the light model's drafts; the "
                     "strong model answers from the best", over_index=_CORPUS_FB),
    "op": Registered(OrderPreservingRAG, RetrievalConfig, "context",
                     "order-preserving RAG: the question's best chunks within the budget, in document order"),
    "vanilla": Registered(VanillaRAG, RetrievalConfig, "context", "the same chunks in score order"),
    "self-route": Registered(SelfRoute, RetrievalConfig, "context",
                             'OP-RAG that may answer "unanswerable", then falls back to LC'),
    "lc": Registered(LongContext, AnswerConfig, "context",
                     "long context: the whole text (cut in the middle, with a warning, past the model's window)"),
    "stepwise": Registered(Stepwise, StepwiseConfig, "context",
                           "a multi-hop question read in steps: self-ask follow-ups, each reading its own best chunks "
                           "(for readers stronger than the bundled 1.5B, which scores below `op` with it)"),
    "funnel": Registered(FunnelRAG, FunnelConfig, "corpus",
                         "FunnelRAG: BM25 over clusters, a pre-ranker over documents, the generator's attention over "
                         "passages"),
    "drag": Registered(DRAG, DragConfig, "corpus",
                       "demonstration-based RAG: m solved examples and k documents, one call"),
    "iterdrag": Registered(IterDRAG, IterDragConfig, "corpus",
                           "self-ask with retrieval: each follow-up question retrieves k more documents"),
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


def described(name: str) -> str:
    """Method ``name`` in one line, and what it is over an index where it reads one too."""
    entry = REGISTRY[name]
    over = f"; with an index, {entry.over_index.description}" if entry.over_index is not None else ""
    return entry.description + over


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
           "check_options", "described", "make_method", "method_kind", "options_of", "registered",
           "AnswerConfig", "AutoConfig", "Config", "CorpusFBConfig", "DragConfig", "FBConfig", "ForwardOnlyConfig",
           "FunnelConfig", "IterDragConfig", "RetrievalConfig", "StepwiseConfig",
           "Auto", "DRAG", "FBRAG", "FunnelRAG", "IterDRAG", "LongContext", "OrderPreservingRAG", "SelfRoute",
           "Stepwise", "VanillaRAG"]
