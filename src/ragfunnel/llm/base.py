"""The LLM protocol and the shared base that does validation, retries, token and call caching.

A backend implements one method, :meth:`BaseLLM._complete`, for one prompt and ``n``
samples. Sampling several outputs of one prompt must not pay several prefills: the
llama.cpp backend reuses the prompt's KV state, HTTP backends send ``n``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ragfunnel.errors import BackendUnavailable, ConfigError
from ragfunnel.types import Completion, SamplingParams

if TYPE_CHECKING:
    from ragfunnel.llm.call_cache import CallCache

log = logging.getLogger(__name__)

THREADS_VARIABLE = "RAGFUNNEL_THREADS"
# Seconds between two looks at ``cancel_check`` while a backend waits (a server's answer, a retry's backoff).
CANCEL_POLL_SECONDS = 0.1


def cpu_threads() -> int:
    """CPU threads for an in-process model: ``RAGFUNNEL_THREADS`` if set (a Ray worker sets its share),
    else every core."""
    value = os.environ.get(THREADS_VARIABLE, "")
    if value.strip():
        if not value.strip().isdigit() or int(value) < 1:
            raise ConfigError(f"{THREADS_VARIABLE}={value!r} is not a positive whole number; fix it or unset it")
        return int(value)
    return os.cpu_count() or 1


@runtime_checkable
class LLM(Protocol):
    """What every method needs from a language model."""

    name: str
    # Called between the steps of a call (prompt slices, decode steps, waits on a server); it raises to end
    # the call (the server points it at the running job). None: nothing ends a call early. A backend that
    # cannot stop inside a call still looks at it before each attempt (BaseLLM does).
    cancel_check: Callable[[], None] | None

    @property
    def context_window(self) -> int: ...

    def generate(
        self,
        prompts: list[str],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        n: int = 1,
        stop: tuple[str, ...] = (),
        seed: int = 0,
        grammar: str | None = None,
        keep_prefix: int = 0,
    ) -> list[list[Completion]]: ...

    def count_tokens(self, text: str) -> int: ...

    @property
    def fingerprint(self) -> str:
        """What identifies the weights: the SHA-256 of a local file, a server's URL and model name."""
        ...


class TransientError(Exception):
    """Raised by a backend for failures worth retrying (timeouts, 429, 5xx)."""


class BaseLLM:
    """Shared machinery; subclasses implement ``_complete`` and ``_count_tokens``."""

    name: str = "llm"
    max_retries: int = 3
    backoff_seconds: float = 0.5
    # Seconds a call may go on failing, retries and backoff included (None: only max_retries bounds it).
    deadline: float | None = None
    _TOKEN_CACHE_SIZE = 200_000
    # Whether a call right after another with the same prompt reads only what is new (the backend keeps
    # the prompt's state): a few extra samples of an answer then cost decoding alone.
    reuses_prompt: bool = False

    def __init__(self) -> None:
        self._token_cache: dict[str, int] = {}
        # Answers identical calls from disk; the registry sets it on the models it creates.
        self.call_cache: CallCache | None = None
        self._call = threading.local()  # when the current thread's call must end (methods call from threads)
        self.cancel_check: Callable[[], None] | None = None

    @property
    def context_window(self) -> int:
        raise NotImplementedError

    @property
    def fingerprint(self) -> str:
        """What identifies this model's weights in cache keys (backends with a weights file hash it)."""
        return f"{type(self).__name__}:{self.name}"

    def generate(
        self,
        prompts: list[str],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        n: int = 1,
        stop: tuple[str, ...] = (),
        seed: int = 0,
        grammar: str | None = None,
        keep_prefix: int = 0,
    ) -> list[list[Completion]]:
        """Return ``n`` completions for each prompt, in prompt order.

        ``grammar`` (GBNF, as llama.cpp reads it) constrains every output where the backend can
        enforce it (llama.cpp in-process, llama.cpp's server); other backends ignore it, so callers
        still parse what comes back. ``keep_prefix``: see :class:`SamplingParams`.
        """
        if n < 1:
            raise ConfigError(f"n (samples per prompt) must be at least 1, got {n}")
        params = SamplingParams(max_tokens, temperature, top_p, top_k, tuple(stop), seed, grammar, keep_prefix)
        return [self._cached_or_complete(prompt, params, n) for prompt in prompts]

    def yes_probability(self, prompt: str, answer: str, check: str) -> float | None:
        """The probability the model replies "Yes" (against "No") to ``check``, asked after it answered
        ``prompt`` with ``answer``; None where the backend cannot read token probabilities."""
        return None

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this model's own tokenizer (cached per text)."""
        cached = self._token_cache.get(text)
        if cached is None:
            cached = self._count_tokens(text)
            if len(self._token_cache) >= self._TOKEN_CACHE_SIZE:
                self._token_cache.clear()
            self._token_cache[text] = cached
        return cached

    def _cached_or_complete(self, prompt: str, params: SamplingParams, n: int) -> list[Completion]:
        cache = self.call_cache
        if cache is None:
            return self._with_retries(prompt, params, n)
        fingerprint = self.fingerprint
        hit = cache.get(fingerprint, prompt, params, n)
        if hit is not None:
            return hit
        completions = self._with_retries(prompt, params, n)
        cache.put(fingerprint, prompt, params, n, completions, name=self.name)
        return completions

    def _with_retries(self, prompt: str, params: SamplingParams, n: int) -> list[Completion]:
        self._restart_deadline()
        try:
            for attempt in range(self.max_retries + 1):
                self._stop_if_cancelled()
                try:
                    return self._complete(prompt, params, n)
                except TransientError as e:
                    delay = self.backoff_seconds * 2**attempt
                    left = self._time_left()
                    if attempt == self.max_retries or (left is not None and left < delay):
                        raise BackendUnavailable(
                            f"{self.name} kept failing after {attempt + 1} attempt{'s' if attempt else ''} ({e}); "
                            "check that the server is up and not overloaded"
                        ) from None
                    log.warning("%s: %s; retrying in %.1fs", self.name, e, delay)
                    self._pause(delay)
            raise AssertionError("unreachable")
        finally:
            self._call.ends = None

    def _stop_if_cancelled(self) -> None:
        """Raise what :attr:`cancel_check` raises; backends call it between the steps of a call."""
        if self.cancel_check is not None:
            self.cancel_check()

    def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, ended early by a cancellation (a backoff must not outlast the caller's interest)."""
        ends = time.monotonic() + seconds
        while (left := ends - time.monotonic()) > 0:
            self._stop_if_cancelled()
            time.sleep(min(left, CANCEL_POLL_SECONDS))

    def _restart_deadline(self) -> None:
        """Start the clock of :attr:`deadline`; a backend that needs several requests for one call
        restarts it after each answered one, since the deadline bounds waiting, not work."""
        self._call.ends = None if self.deadline is None else time.monotonic() + self.deadline

    def _time_left(self) -> float | None:
        """Seconds the current call may still wait (None: no deadline); backends cap each wait by it."""
        ends = getattr(self._call, "ends", None)
        return None if ends is None else ends - time.monotonic()

    def _complete(self, prompt: str, params: SamplingParams, n: int) -> list[Completion]:
        raise NotImplementedError

    def _count_tokens(self, text: str) -> int:
        raise NotImplementedError
