"""The one-call Python API, mirroring ``ragfunnel ask``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.errors import ConfigError
from ragfunnel.methods import DEFAULT_CORPUS_METHOD, DEFAULT_METHOD, make_method
from ragfunnel.types import Prediction


def answer(
    question: str,
    context: str | None = None,
    *,
    index: CorpusIndex | str | Path | None = None,
    method: str | None = None,
    choices: list[str] | None = None,
    **options: Any,
) -> Prediction:
    """Answer ``question`` from a long ``context``, or from a corpus ``index`` (a directory written by
    ``ragfunnel index``), with ``method`` (see ``ragfunnel.METHODS``; by default ``auto`` over a
    context, ``funnel`` over an index).

    ``options`` are the method's keyword options, e.g. ``light="bundled:qwen2.5-0.5b"``,
    ``strong="openai:http://127.0.0.1:8000/v1#qwen"``, ``budget=1500``, ``samples=5``,
    ``task="multihop"``, or ``documents=5`` for DRAG. An option the method does not take is an error
    naming the ones it does.
    """
    if (context is None) == (index is None):
        raise ConfigError("answer() reads either a context (a long text) or an index (a corpus index directory); "
                          "pass exactly one")
    if index is None:
        return make_method(method or DEFAULT_METHOD, **options).run(question, context, choices=choices)
    return make_method(method or DEFAULT_CORPUS_METHOD, index=index, **options).run(question, choices=choices)
