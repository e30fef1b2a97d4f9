"""A scripted LLM for unit tests of control flow. Never a default anywhere."""

from __future__ import annotations

from collections.abc import Callable

from ragfunnel.llm.base import BaseLLM
from ragfunnel.types import Completion, SamplingParams


class FakeLLM(BaseLLM):
    """Replies from a function of the prompt; counts tokens as whitespace words.

    ``reply(prompt, sample_index) -> str``. Every call is recorded in ``calls`` as
    ``(prompt, n)`` so tests can check what a method sent, and its grammar (or None) in
    ``grammars``, one entry per call. Like a real backend it looks at the call's cancellation between
    samples. It declares no capabilities beyond that (a test that needs one subclasses it and declares it).
    """

    def __init__(self, reply: Callable[[str, int], str], *, name: str = "fake", context_window: int = 4096):
        super().__init__()
        self.name = name
        self._reply = reply
        self._window = context_window
        self.calls: list[tuple[str, int]] = []
        self.grammars: list[str | None] = []

    @property
    def context_window(self) -> int:
        return self._window

    def _complete(self, prompt: str, params: SamplingParams, n: int) -> list[Completion]:
        self.calls.append((prompt, n))
        self.grammars.append(params.grammar)
        outs = []
        for i in range(n):
            self._stop_if_cancelled()
            text = self._reply(prompt, i)
            outs.append(Completion(text, self.count_tokens(prompt), len(text.split()), 0.0))
        return outs

    def _count_tokens(self, text: str) -> int:
        return len(text.split())
