"""Model specs (strings) resolved to LLM instances.

``bundled:NAME``            a bundled GGUF model (``ragfunnel models`` lists them)
``gguf:PATH``               any local GGUF file, run by llama.cpp
``hf:OWNER/REPO/FILE.gguf``  a GGUF file of a Hugging Face hub repository (``@REVISION`` after it pins one),
                            downloaded once into the model cache and run by llama.cpp (``hub.py``)
``ollama:NAME``             a model of the local Ollama server ($OLLAMA_HOST), through its OpenAI-compatible API
``openai:URL#MODEL``        any OpenAI-compatible server, e.g. ``openai:http://127.0.0.1:8000/v1#qwen``;
                            several servers of one model as ``openai:URL1,URL2#MODEL``, taking requests
                            in turn (one that fails sits out a cool-off while the others serve)

Nothing is downloaded but what an ``hf:`` spec names; a bare hub name (``OWNER/REPO``) is no spec.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragfunnel.errors import ConfigError, option
from ragfunnel.llm import bundled
from ragfunnel.llm.base import LLM, THREADS_VARIABLE
from ragfunnel.llm.call_cache import default_call_cache
from ragfunnel.llm.prefix_store import default_prefix_store

DEFAULT_LIGHT = "bundled:qwen2.5-0.5b"
DEFAULT_STRONG = "bundled:qwen2.5-1.5b"


def _bundled(rest: str) -> LLM:
    from ragfunnel.llm.llamacpp import LlamaCppLLM

    return LlamaCppLLM(bundled.ensure(rest), name=f"bundled:{rest}", sha256=bundled.get(rest).sha256)


def _gguf(rest: str) -> LLM:
    from ragfunnel.llm.gguf import check_gguf_file
    from ragfunnel.llm.llamacpp import LlamaCppLLM

    check_gguf_file(Path(rest))
    return LlamaCppLLM(rest, name=f"gguf:{rest}")


def _hf(rest: str) -> LLM:
    from ragfunnel.llm import hub
    from ragfunnel.llm.llamacpp import LlamaCppLLM

    file = hub.parse_hf(rest)
    pulled = hub.pull(file)
    return LlamaCppLLM(pulled.path, name=file.spec, sha256=pulled.sha256)


def _ollama(rest: str) -> LLM:
    from ragfunnel.llm import hub

    url, model = hub.ollama_server(rest)  # one line saying what to run if the server or the model is missing
    return _openai_llm([url], model)


def _server(rest: str) -> tuple[list[str], str]:
    """The server URLs (without a trailing slash) and the model name of an ``openai:`` spec."""
    listed, sep, model = rest.partition("#")
    if not sep or not model or "," not in listed and not listed.startswith(("http://", "https://")):
        raise ConfigError(f"bad openai spec 'openai:{rest}'; write it as openai:http://HOST:PORT/v1#MODEL")
    urls: list[str] = []
    for url in listed.split(","):
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"bad server URL {url!r} in 'openai:{rest}'; list the servers of one model as "
                              "openai:http://HOST1:PORT/v1,http://HOST2:PORT/v1#MODEL")
        if url.rstrip("/") in urls:
            raise ConfigError(f"server {url.rstrip('/')} is listed twice in 'openai:{rest}'; list each server once")
        urls.append(url.rstrip("/"))
    return urls, model


def _openai(rest: str) -> LLM:
    return _openai_llm(*_server(rest))


def _openai_llm(urls: list[str], model: str) -> LLM:
    from ragfunnel.llm.openai import OpenAICompatibleLLM

    llm = OpenAICompatibleLLM(urls, model)
    if _server_timeout is not None:
        llm.set_timeout(_server_timeout)
    return llm


SCHEMES: dict[str, Callable[[str], LLM]] = {"bundled": _bundled, "gguf": _gguf, "hf": _hf, "ollama": _ollama,
                                            "openai": _openai}

_loaded: dict[str, LLM] = {}
_registered: dict[str, LLM] = {}  # specs given their model object with :func:`registered`
_disk_caches = True
_server_timeout: float | None = None  # None: each server backend's own defaults
_HUB_NAME = re.compile(r"[\w.-]+/[\w.-]+")  # owner/name, as people copy it from the hub


def _parse(spec: str) -> tuple[str, str]:
    """``(scheme, rest)`` of a spec, or a ConfigError listing the valid forms."""
    scheme, sep, rest = spec.partition(":")
    if not sep or scheme not in SCHEMES:
        valid = ", ".join(f"bundled:{n}" for n in bundled.BUNDLED)
        hub = ""
        if _HUB_NAME.fullmatch(spec):
            hub = (f"; a Hugging Face GGUF file is hf:{spec}/FILE.gguf (its Files tab lists them), or serve the "
                   "model (vLLM, llama.cpp server) and use openai:URL#MODEL")
        raise ConfigError(f"unknown model spec {spec!r}; use one of {valid}, gguf:PATH, hf:OWNER/REPO/FILE.gguf, "
                          f"ollama:NAME, openai:URL#MODEL{hub}")
    if not rest:
        raise ConfigError(f"model spec {spec!r} names nothing after '{scheme}:'")
    if scheme == "bundled":
        bundled.get(rest)  # unknown names fail here, listing the valid ones
    if scheme == "hf":
        from ragfunnel.llm import hub as hf_hub

        hf_hub.parse_hf(rest)  # a malformed one fails here, before any download
    return scheme, rest


def resolve(spec: str | LLM) -> LLM:
    """Return the LLM for ``spec``; one instance per spec per process (models are big)."""
    if not isinstance(spec, str):
        return spec  # already an LLM object
    if spec in _loaded:
        return _loaded[spec]
    scheme, rest = _parse(spec)
    llm = SCHEMES[scheme](rest)
    _attach_caches(llm)
    _loaded[spec] = llm
    return llm


@contextmanager
def registered(spec: str, llm: LLM) -> Iterator[LLM]:
    """Within the block, ``spec`` resolves to ``llm``: a model object of your own (a custom backend, a
    scripted model in a test) reached through code that takes spec strings, such as the CLI's options."""
    if spec in _registered:
        raise ConfigError(f"model spec {spec!r} is already registered")
    _registered[spec] = _loaded[spec] = llm
    try:
        yield llm
    finally:
        del _registered[spec]
        _loaded.pop(spec, None)


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


def set_server_timeout(seconds: float) -> None:
    """Wait up to ``seconds`` for a server's answer, and give up on a call after 1.5 times that, retries
    included, for every ``openai:`` model resolved so far and from now on.

    Process-wide for the same reason as :func:`set_disk_caches`: the CLI's ``--timeout`` must reach
    every model a command resolves from a spec string. Library code can call ``set_timeout`` on its LLM.
    """
    from ragfunnel.llm.openai import OpenAICompatibleLLM

    if not seconds > 0:
        raise ConfigError(f"{option('timeout')} must be a positive number of seconds, got {seconds}")
    global _server_timeout
    _server_timeout = float(seconds)
    for llm in _loaded.values():
        if isinstance(llm, OpenAICompatibleLLM):
            llm.set_timeout(_server_timeout)


def process_settings() -> dict[str, Any]:
    """The process-wide switches set so far (:func:`set_disk_caches`, :func:`set_server_timeout`), to carry
    into worker processes with :func:`apply_process_settings`."""
    return {"disk_caches": _disk_caches, "server_timeout": _server_timeout}


def apply_process_settings(settings: dict[str, Any]) -> None:
    """Set this process's switches to ``settings`` (from :func:`process_settings`); ``threads``, if given,
    is how many CPU threads in-process models use (``RAGFUNNEL_THREADS``)."""
    set_disk_caches(settings["disk_caches"])
    if settings["server_timeout"] is not None:
        set_server_timeout(settings["server_timeout"])
    if settings.get("threads"):
        os.environ[THREADS_VARIABLE] = str(settings["threads"])


def model_identity(spec: str) -> dict[str, Any]:
    """What a run config records about a model: the spec, plus the SHA-256 of a local file's weights
    (hashed once per version of the file) or the server URL (``urls``, a list, for several) and model
    name. Loads nothing."""
    if spec in _registered:
        return {"spec": spec, "fingerprint": _registered[spec].fingerprint}
    scheme, rest = _parse(spec)
    if scheme == "bundled":
        return {"spec": spec, "sha256": bundled.get(rest).sha256}  # ensure() refuses any other file
    if scheme == "openai":
        urls, model = _server(rest)
        servers = {"url": urls[0]} if len(urls) == 1 else {"urls": urls}
        return {"spec": spec, **servers, "model": model}
    if scheme == "ollama":
        from ragfunnel.llm.hub import ollama_url

        return {"spec": spec, "url": f"{ollama_url()}/v1", "model": rest}
    if scheme == "hf":
        from ragfunnel.llm import hub

        file = hub.parse_hf(rest)
        pulled = hub.pull(file)  # the spec asks for the file; in the cache, nothing is asked of the network
        return {"spec": spec, "repo": file.repo, "file": file.filename, "revision": file.revision,
                "path": str(pulled.path), "bytes": pulled.path.stat().st_size, "sha256": pulled.sha256}
    from ragfunnel.llm.fingerprint import file_sha256
    from ragfunnel.llm.gguf import check_gguf_file

    path = Path(rest)
    check_gguf_file(path)
    return {"spec": spec, "path": str(path.resolve()), "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def check_backends(specs: Iterable[str]) -> None:
    """Fail now, in one line, if a model cannot be used: a local file missing or not GGUF (bundled
    models are also verified), a server that does not answer. Runs call it before writing any row."""
    for spec in dict.fromkeys(specs):
        resolve(spec).check_reachable()


def _attach_caches(llm: LLM) -> None:
    llm.call_cache = default_call_cache() if _disk_caches else None
    if llm.capabilities.prefix_state:
        llm.disk_prefixes = default_prefix_store() if _disk_caches else None


def reset_loaded() -> None:
    """Drop the cached prompt state of every model loaded so far (in-process backends only).

    Evaluation calls this before each (example, method) so that no method's latency rides on
    a prefix another method left in the cache.
    """
    for llm in _loaded.values():
        llm.reset()
