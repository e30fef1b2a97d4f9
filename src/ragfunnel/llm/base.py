"""The LLM protocol, what each backend declares it can do, and the shared base that does validation,
retries, token and call caching.

A backend implements one method, :meth:`BaseLLM._complete`, for one prompt and ``n``
samples. Sampling several outputs of one prompt must not pay several prefills: the
llama.cpp backend reuses the prompt's KV state, HTTP backends send ``n``.

What a backend can do beyond that is declared once, in its :class:`Capabilities`. Every member a caller
may use is on :class:`LLM` and :class:`BaseLLM` gives each a safe default, so callers call a member or test
a declared capability; they never probe for one.

One model object serves many requests, so what belongs to one request travels with its call, not on the
model: the :class:`Cancellation` that ends it early and the sink its text streams to. ``generate`` takes
both; by default each comes from the block the call runs in (:func:`cancelled_by`, :func:`streaming`),
which the server opens around each job.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from ragfunnel.errors import BackendUnavailable, ConfigError, RagfunnelError
from ragfunnel.types import Completion, SamplingParams

if TYPE_CHECKING:
    from ragfunnel.llm.call_cache import CallCache
    from ragfunnel.llm.prefix_store import DiskPrefixStore

log = logging.getLogger(__name__)

GREEDY = SamplingParams()  # what a call samples unless it says otherwise
THREADS_VARIABLE = "RAGFUNNEL_THREADS"
# Seconds between two looks at the call's cancellation while a backend waits (a server's answer, a retry's backoff).
CANCEL_POLL_SECONDS = 0.1

TextSink = Callable[[str], None]


def cpu_threads() -> int:
    """CPU threads for an in-process model: ``RAGFUNNEL_THREADS`` if set (a Ray worker sets its share),
    else every core."""
    value = os.environ.get(THREADS_VARIABLE, "")
    if value.strip():
        if not value.strip().isdigit() or int(value) < 1:
            raise ConfigError(f"{THREADS_VARIABLE}={value!r} is not a positive whole number; fix it or unset it")
        return int(value)
    return os.cpu_count() or 1


class Cancelled(RagfunnelError):
    """Raised inside work that is no longer wanted: its deadline passed, its client went away, the server is
    stopping."""


class Cancellation:
    """What ends a call early: :meth:`cancel` it from any thread, and the call's next :meth:`check` raises
    :class:`Cancelled`.

    Backends check between the steps of a call: llama.cpp between 64-token slices of the prompt it reads
    and between decode steps (of one sequence or of K drafts together); the OpenAI backend while it waits
    for a server (closing the request, so the server stops generating) and during a retry's backoff; every
    backend before each attempt. ``label`` names the work in the error.
    """

    def __init__(self, label: str = "the call"):
        self.label = label
        self._why = ""
        self._event = threading.Event()

    def cancel(self, why: str) -> None:
        """End the work at its next check; the first reason given is the one reported."""
        if not self._event.is_set():
            self._why = why
            self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        """Raise :class:`Cancelled` if the work was cancelled."""
        if self._event.is_set():
            raise Cancelled(f"{self.label} was cancelled: {self._why}")


_cancellation: ContextVar[Cancellation | None] = ContextVar("cancellation", default=None)


@contextmanager
def cancelled_by(token: Cancellation) -> Iterator[Cancellation]:
    """Within the block, in this thread, ``token`` ends every model call not given a token of its own
    (the server runs each job in one, so the models it shares between jobs hold no job's state)."""
    previous = _cancellation.set(token)
    try:
        yield token
    finally:
        _cancellation.reset(previous)


def current_cancellation() -> Cancellation | None:
    """The token of the innermost :func:`cancelled_by` block around this point (None: nothing ends a call early)."""
    return _cancellation.get()


@dataclass(frozen=True)
class TextChannel:
    """Where one model's text goes as it is written: each piece ``model`` writes goes to ``sink`` (None:
    nowhere). A channel names its model because only the answering model's text is the answer: a light
    model's drafts, written in the same block, stay out of it."""

    model: LLM
    sink: TextSink | None


_channels: ContextVar[tuple[TextChannel, ...]] = ContextVar("text_channels", default=())


@contextmanager
def streaming(model: LLM, sink: TextSink | None) -> Iterator[None]:
    """Within the block, in this thread, the text ``model`` writes goes to ``sink`` as it is written (None:
    nowhere, whatever an outer block says). Only backends whose capabilities say ``streams_text`` write any."""
    previous = _channels.set((*_channels.get(), TextChannel(model, sink)))
    try:
        yield
    finally:
        _channels.reset(previous)


def text_sink(model: LLM) -> TextSink | None:
    """Where ``model``'s text goes now: the sink of the innermost :func:`streaming` block naming it (None: nowhere).
    Backends that stream text look it up when a call starts."""
    for channel in reversed(_channels.get()):
        if channel.model is model:
            return channel.sink
    return None


ReadingSink = Callable[[int, int], None]  # (prompt tokens held so far, prompt tokens in all)
_reading: ContextVar[ReadingSink | None] = ContextVar("reading_progress", default=None)


@contextmanager
def reading_progress(sink: ReadingSink | None) -> Iterator[None]:
    """Within the block, in this thread, a backend that reads prompts in slices reports after each how many of
    the prompt's tokens it holds, out of how many (a long prefill shows its progress)."""
    previous = _reading.set(sink)
    try:
        yield
    finally:
        _reading.reset(previous)


def reading_sink() -> ReadingSink | None:
    """Where prompt-reading progress goes now (None: nowhere)."""
    return _reading.get()


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond reading prompts and writing text, declared once on its class.

    Callers test these flags and never probe for members. A flag named after a member of :class:`LLM` says
    the backend defines that member itself (elsewhere :class:`BaseLLM`'s default answers); defining a
    :class:`BaseLLM` subclass checks that pairing, so a declaration cannot drift from the code.
    """

    # Keeps the KV state after a document prefix (``SamplingParams.keep_prefix``) in memory and in
    # ``disk_prefixes``; ``prefix_state`` says where one would come from, ``last_prefix`` what the last call did.
    prefix_state: bool = False
    # A call right after another with the same prompt reads only what is new: a few more samples of an
    # answer cost decoding alone.
    reuses_prompt: bool = False
    # Reads P("Yes") against P("No") of a reply (``yes_probability``).
    yes_probability: bool = False
    # Sends the text of one-sample calls to the call's sink as it is written (``on_text``, :func:`streaming`).
    streams_text: bool = False
    # Loads something (weights, a client) on first use that ``warm_up`` loads now.
    warm_up: bool = False
    # Holds prompt state in memory that ``reset`` forgets.
    reset: bool = False
    # Talks to servers that ``check_reachable`` asks whether they answer.
    check_reachable: bool = False


# The capabilities that say a backend defines the member of the same name.
_MEMBER_CAPABILITIES = ("prefix_state", "yes_probability", "warm_up", "reset", "check_reachable")


@runtime_checkable
class LLM(Protocol):
    """Everything a caller may use of a language model. What a backend may lack is declared in its
    :attr:`capabilities`; :class:`BaseLLM` gives every member a safe default."""

    name: str
    capabilities: ClassVar[Capabilities]
    # Answers identical calls from disk (None: every call runs the model).
    call_cache: CallCache | None
    # Where document prefix states are kept between processes (None: memory only); used where
    # ``capabilities.prefix_state``.
    disk_prefixes: DiskPrefixStore | None
    # What the last ``keep_prefix`` did: where the state came from, its tokens, its seconds ({}: nothing kept).
    last_prefix: dict[str, Any]

    @property
    def context_window(self) -> int: ...

    @property
    def fingerprint(self) -> str:
        """What identifies the weights: the SHA-256 of a local file, a server's URL and model name."""
        ...

    def generate(self, prompts: list[str], params: SamplingParams = GREEDY, *, n: int = 1,
                 cancel: Cancellation | None = None, on_text: TextSink | None = None) -> list[list[Completion]]: ...

    def count_tokens(self, text: str) -> int: ...

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]: ...

    @property
    def tokenizer_identity(self) -> str | None:
        """What decides this model's token counts, for keeping them on disk (None: they are not kept)."""
        ...

    def warm_up(self) -> None: ...

    def reset(self) -> None: ...

    def check_reachable(self) -> None: ...

    def prefix_state(self, prefix: str) -> str: ...

    def yes_probability(self, prompt: str, answer: str, check: str) -> float | None: ...


class TransientError(Exception):
    """Raised by a backend for failures worth retrying (timeouts, 429, 5xx)."""


class _CallClock(threading.local):
    """When the current thread's call must stop failing and give up (None: no deadline); methods call from threads."""

    ends: float | None = None


class BaseLLM:
    """Shared machinery; subclasses implement ``_complete`` and ``_count_tokens`` and declare their
    :attr:`capabilities`."""

    name: str = "llm"
    capabilities: ClassVar[Capabilities] = Capabilities()
    max_retries: int = 3
    backoff_seconds: float = 0.5
    # Seconds a call may go on failing, retries and backoff included (None: only max_retries bounds it).
    deadline: float | None = None
    _TOKEN_CACHE_SIZE = 200_000

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a class whose declared capabilities do not match the members it defines."""
        super().__init_subclass__(**kwargs)
        declared = asdict(cls.capabilities)
        own = cls.__mro__[: cls.__mro__.index(BaseLLM)]
        for member in _MEMBER_CAPABILITIES:
            defines = any(member in vars(klass) for klass in own)
            if defines != declared[member]:
                problem = (f"defines {member}() but its capabilities do not declare {member}=True" if defines
                           else f"declares {member}=True but defines no {member}()")
                raise TypeError(f"{cls.__name__} {problem}; make its capabilities = Capabilities(...) say what "
                                "the class does")

    def __init__(self) -> None:
        self._token_cache: dict[str, int] = {}
        # Answers identical calls from disk; the registry sets it on the models it creates.
        self.call_cache: CallCache | None = None
        self.disk_prefixes: DiskPrefixStore | None = None
        self.last_prefix: dict[str, Any] = {}
        self._call = _CallClock()

    @property
    def context_window(self) -> int:
        raise NotImplementedError

    @property
    def fingerprint(self) -> str:
        """What identifies this model's weights in cache keys (backends with a weights file hash it)."""
        return f"{type(self).__name__}:{self.name}"

    def warm_up(self) -> None:
        """Load now what the first call would load; a backend that loads nothing ahead has nothing to do."""

    def reset(self) -> None:
        """Forget every prompt state held in memory, so the next call reads its prompt in full; a backend
        that holds none has nothing to forget."""

    def check_reachable(self) -> None:
        """Fail now, in one line, if the model cannot be used; a backend without a server always can be."""

    def prefix_state(self, prefix: str) -> str:
        """Where the KV state after ``prefix`` would come from now: resident, memory, disk or none. A backend
        that keeps no prefix states has none."""
        return "none"

    def generate(self, prompts: list[str], params: SamplingParams = GREEDY, *, n: int = 1,
                 cancel: Cancellation | None = None, on_text: TextSink | None = None) -> list[list[Completion]]:
        """Return ``n`` completions for each prompt, in prompt order, sampled as ``params`` says (by default
        greedily, 64 tokens at most).

        ``params.grammar`` (GBNF, as llama.cpp reads it) constrains every output where the backend can
        enforce it (llama.cpp in-process, llama.cpp's server); other backends ignore it, so callers
        still parse what comes back.

        ``cancel`` ends the call early when cancelled (None: the token of the :func:`cancelled_by` block
        the call runs in, if any). ``on_text`` receives the text of one-sample calls as it is written, where
        the backend ``streams_text`` (None: the sink of the :func:`streaming` block naming this model, if
        any); an answer from the call cache is not streamed.
        """
        if n < 1:
            raise ConfigError(f"n (samples per prompt) must be at least 1, got {n}")
        with ExitStack() as call:
            if cancel is not None:
                call.enter_context(cancelled_by(cancel))
            if on_text is not None:
                call.enter_context(streaming(self, on_text))
            return [self._cached_or_complete(prompt, params, n) for prompt in prompts]

    def yes_probability(self, prompt: str, answer: str, check: str) -> float | None:
        """The probability the model replies "Yes" (against "No") to ``check``, asked after it answered
        ``prompt`` with ``answer`` (None where this reply gives none). Only backends whose capabilities
        say ``yes_probability`` answer; ask the others and this is a ConfigError."""
        raise ConfigError(f"{self.name} cannot read the probability of a Yes/No reply; test "
                          "llm.capabilities.yes_probability before asking, or judge with a model that can "
                          "(a llama.cpp model, or an OpenAI-compatible chat server)")

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this model's own tokenizer (cached per text)."""
        cached = self._token_cache.get(text)
        if cached is None:
            cached = self._count_tokens(text)
            if len(self._token_cache) >= self._TOKEN_CACHE_SIZE:
                self._token_cache.clear()
            self._token_cache[text] = cached
        return cached

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each of ``texts``, as :meth:`count_tokens` counts them; the texts not counted before go to
        the backend together (:meth:`_count_tokens_many`), so a backend can count a document's chunks in one go."""
        counts = [self._token_cache.get(t) for t in texts]
        missing = list(dict.fromkeys(t for t, c in zip(texts, counts, strict=True) if c is None))
        if missing:
            fresh = dict(zip(missing, self._count_tokens_many(missing), strict=True))
            if len(self._token_cache) + len(fresh) > self._TOKEN_CACHE_SIZE:
                self._token_cache.clear()
            self._token_cache.update(fresh)
            counts = [fresh[t] if c is None else c for t, c in zip(texts, counts, strict=True)]
        return counts

    @property
    def tokenizer_identity(self) -> str | None:
        """What decides this model's token counts, for keeping them on disk: None by default, and they are kept
        in memory only. A fingerprint is not enough (a backend's default one is its class and name, not its
        weights): a backend whose counts a file and a library decide names both (llama.cpp: its version and the
        GGUF file's SHA-256)."""
        return None

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
        """Raise :class:`Cancelled` if the call's cancellation was cancelled; backends call it between the
        steps of a call (what runs outside ``generate``, such as ``yes_probability``, follows
        :func:`current_cancellation`)."""
        token = _cancellation.get()
        if token is not None:
            token.check()

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
        ends = self._call.ends
        return None if ends is None else ends - time.monotonic()

    def _complete(self, prompt: str, params: SamplingParams, n: int) -> list[Completion]:
        raise NotImplementedError

    def _count_tokens(self, text: str) -> int:
        raise NotImplementedError

    def _count_tokens_many(self, texts: list[str]) -> list[int]:
        """Tokens of each text; a backend that can count several texts at once overrides this."""
        return [self._count_tokens(t) for t in texts]
