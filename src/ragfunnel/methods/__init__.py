"""Methods over a provided long context, by name."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol

from ragfunnel.errors import ConfigError
from ragfunnel.methods.auto import Auto
from ragfunnel.methods.fbrag import FBRAG
from ragfunnel.methods.long_context import LongContext
from ragfunnel.methods.order_preserving import OrderPreservingRAG
from ragfunnel.methods.self_route import SelfRoute
from ragfunnel.methods.vanilla import VanillaRAG
from ragfunnel.types import Prediction


class Method(Protocol):
    name: str

    def run(self, question: str, context: str, *, choices: list[str] | None = None) -> Prediction: ...


def _fb(**options: Any) -> FBRAG:
    return FBRAG(**{"eta_forward": 0.5, "eta_backward": 0.5, **options})


def _fb_f(**options: Any) -> FBRAG:
    return FBRAG(**{"eta_forward": 1.0, "eta_backward": 0.0, **options})


METHODS: dict[str, tuple[Callable[..., Method], type]] = {
    "auto": (Auto, Auto),
    "fb-f": (_fb_f, FBRAG),
    "fb": (_fb, FBRAG),
    "op": (OrderPreservingRAG, OrderPreservingRAG),
    "vanilla": (VanillaRAG, VanillaRAG),
    "self-route": (SelfRoute, SelfRoute),
    "lc": (LongContext, LongContext),
}
DEFAULT_METHOD = "auto"


def options_of(name: str) -> list[str]:
    """The keyword options method ``name`` accepts."""
    return [p for p in inspect.signature(METHODS[name][1].__init__).parameters if p != "self"]


def make_method(name: str, **options: Any) -> Method:
    """Build method ``name``; options it does not take are an error that lists the ones it does."""
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}")
    valid = options_of(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(f"method {name} does not take {', '.join(unknown)}; it takes {', '.join(valid)}")
    factory, _ = METHODS[name]
    return factory(**options)


__all__ = ["METHODS", "DEFAULT_METHOD", "Method", "make_method", "options_of", "Auto", "FBRAG", "LongContext",
           "OrderPreservingRAG", "SelfRoute", "VanillaRAG"]
