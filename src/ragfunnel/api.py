"""The one-call Python API, mirroring ``ragfunnel ask``."""

from __future__ import annotations

from typing import Any

from ragfunnel.methods import DEFAULT_METHOD, make_method
from ragfunnel.types import Prediction


def answer(
    question: str,
    context: str,
    *,
    method: str = DEFAULT_METHOD,
    choices: list[str] | None = None,
    **options: Any,
) -> Prediction:
    """Answer ``question`` from ``context`` with ``method`` (see ``ragfunnel.METHODS``).

    ``options`` are the method's keyword options, e.g. ``light="bundled:qwen2.5-0.5b"``,
    ``strong="openai:http://127.0.0.1:8000/v1#qwen"``, ``budget=1500``, ``samples=5``,
    ``task="multihop"``. An option the method does not take is an error naming the ones it does.
    """
    return make_method(method, **options).run(question, context, choices=choices)
