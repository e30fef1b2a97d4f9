"""Model specs (strings) resolved to LLM instances.

``bundled:NAME``            a bundled GGUF model (``ragfunnel models`` lists them)
``gguf:PATH``               any local GGUF file, run by llama.cpp
``openai:URL#MODEL``        any OpenAI-compatible server, e.g. ``openai:http://127.0.0.1:8000/v1#qwen``
"""

from __future__ import annotations

from collections.abc import Callable

from ragfunnel.errors import ConfigError
from ragfunnel.llm import bundled
from ragfunnel.llm.base import LLM, BaseLLM
from ragfunnel.llm.call_cache import default_call_cache
from ragfunnel.llm.prefix_store import default_prefix_store

DEFAULT_LIGHT = "bundled:qwen2.5-0.5b"
DEFAULT_STRONG = "bundled:qwen2.5-1.5b"


def _bundled(rest: str) -> LLM:
    from ragfunnel.llm.llamacpp import LlamaCppLLM

    return LlamaCppLLM(bundled.ensure(rest), name=f"bundled:{rest}", sha256=bundled.get(rest).sha256)


def _gguf(rest: str) -> LLM:
    from ragfunnel.llm.llamacpp import LlamaCppLLM

    return LlamaCppLLM(rest, name=f"gguf:{rest}")


def _openai(rest: str) -> LLM:
    from ragfunnel.llm.openai import OpenAICompatibleLLM

    url, sep, model = rest.partition("#")
    if not sep or not model or not url.startswith(("http://", "https://")):
        raise ConfigError(f"bad openai spec 'openai:{rest}'; write it as openai:http://HOST:PORT/v1#MODEL")
    return OpenAICompatibleLLM(url, model)


SCHEMES: dict[str, Callable[[str], LLM]] = {"bundled": _bundled, "gguf": _gguf, "openai": _openai}

_loaded: dict[str, LLM] = {}
_disk_caches = True


def resolve(spec: str | LLM) -> LLM:
    """Return the LLM for ``spec``; one instance per spec per process (models are big)."""
    if not isinstance(spec, str):
        return spec  # already an LLM object
    if spec in _loaded:
        return _loaded[spec]
    scheme, sep, rest = spec.partition(":")
    if not sep or scheme not in SCHEMES:
        valid = ", ".join(f"bundled:{n}" for n in bundled.BUNDLED)
        raise ConfigError(
            f"unknown model spec {spec!r}; use one of {valid}, gguf:PATH, openai:URL#MODEL"
        )
    if not rest:
        raise ConfigError(f"model spec {spec!r} names nothing after '{scheme}:'")
    if scheme == "bundled":
        bundled.get(rest)  # unknown names fail here, listing the valid ones
    llm = SCHEMES[scheme](rest)
    _attach_caches(llm)
    _loaded[spec] = llm
    return llm


def set_disk_caches(enabled: bool) -> None:
    """Turn the on-disk caches — LLM calls and document (KV prefix) states — on or off for every model
    resolved so far and from now on.

    Caching is on by default. This is one process-wide switch, not an option of each method, because
    the CLI's ``--no-cache`` must reach every model a command resolves from a spec string, deep inside
    the methods it builds. Library code that holds an LLM object can set its ``call_cache`` instead.
    """
    global _disk_caches
    _disk_caches = enabled
    for llm in _loaded.values():
        _attach_caches(llm)


def disk_caches_enabled() -> bool:
    return _disk_caches


def _attach_caches(llm: LLM) -> None:
    if isinstance(llm, BaseLLM):
        llm.call_cache = default_call_cache() if _disk_caches else None
    if hasattr(llm, "disk_prefixes"):
        llm.disk_prefixes = default_prefix_store() if _disk_caches else None


def reset_loaded() -> None:
    """Drop the cached prompt state of every model loaded so far (in-process backends only).

    Evaluation calls this before each (example, method) so that no method's latency rides on
    a prefix another method left in the cache.
    """
    for llm in _loaded.values():
        getattr(llm, "reset", lambda: None)()
