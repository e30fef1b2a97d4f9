"""What a llama.cpp context holds: tokens read with the common prefix reused, and document prefixes
kept and restored.

A document prefix (instructions and document, before the question) is read once; the KV state
after it is kept in memory and on disk (:mod:`ragfunnel.llm.prefix_store`), keyed by the model
file's SHA-256 and the exact prefix tokens, and restored for the next question instead of reading
the document again. Every function here takes llama-cpp-python's ``Llama`` and works on sequence 0,
through its public API and llama.cpp's own (``llama_cpp``), except :func:`mark_held`.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ragfunnel.llm.base import reading_sink
from ragfunnel.llm.prefix_store import DiskPrefixStore, MemoryPrefixStore, PrefixState, prefix_key

log = logging.getLogger(__name__)

# Tokens read between two looks at the call's cancellation. llama.cpp would read a prompt in n_batch (512)
# pieces, 3-7 s each on two cores for the 135M and 0.5B models, and a cancelled read would go on that
# long; 64 tokens take about 1.3 s on the 1.5B model (49 tokens/s). Smaller pieces read as fast (0.5B
# model on two idle cores: 180 tokens/s in 64s, 185 in 512s); only when other work crowds the cores does
# each decode's wait for its threads make many small pieces slower.
PROMPT_SLICE = 64


def holds(llama: Any, tokens: list[int]) -> bool:
    """Whether the context already holds ``tokens`` at its start."""
    n = len(tokens)
    return llama is not None and llama.n_tokens >= n and list(llama.input_ids[:n]) == tokens


def mark_held(llama: Any, n: int, *, tokens: Sequence[int] | None = None) -> None:
    """Tell llama-cpp-python that its context now holds ``n`` tokens (``tokens`` when given, else the first
    ``n`` it held) and no fresh logits, after the KV cells were changed through llama.cpp's own API.

    llama-cpp-python has no public call for this: only its own ``eval`` keeps ``n_tokens``, ``input_ids``
    and the private ``_requires_eval`` in step with the context. ``_requires_eval`` makes its next
    completion of exactly the held tokens read the last one again rather than sample from stale logits.
    """
    if tokens is not None:
        llama.input_ids[:n] = tokens
    llama.n_tokens = n
    llama._requires_eval = True


def drop_from(llama: Any, position: int, *, seq: int = 0) -> None:
    """Remove sequence ``seq``'s KV cells (-1: every sequence's) from ``position`` on; then mark what is held."""
    import llama_cpp

    llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llama.ctx), seq, position, -1)


def read_tokens(llama: Any, tokens: list[int], *, check: Callable[[], None], keep: int | None = None) -> None:
    """Make sequence 0 hold ``tokens`` with fresh logits for the last one.

    ``keep``: tokens of the current state to keep (None: as many as ``tokens`` shares with it,
    always re-reading the last one so that its logits are fresh). The rest is read in slices of
    :data:`PROMPT_SLICE`, calling ``check`` before each; when it raises, the context holds the
    slices read so far, a prefix the next read of the same prompt reuses. After each slice, the
    :func:`ragfunnel.llm.base.reading_progress` sink in effect hears how many tokens are held of how many.
    """
    common = 0
    if keep is None:
        limit = min(llama.n_tokens, len(tokens) - 1)
        while common < limit and llama.input_ids[common] == tokens[common]:
            common += 1
    else:
        common = keep
    drop_from(llama, common)
    mark_held(llama, common)  # the logits left over are not the last kept token's
    progress = reading_sink()
    for start, end in _slices(common, len(tokens), min(PROMPT_SLICE, llama.n_batch)):
        check()
        llama.eval(tokens[start:end])
        if progress is not None:
            progress(end, len(tokens))


def _slices(start: int, stop: int, size: int) -> Iterator[tuple[int, int]]:
    """``[start, stop)`` cut at multiples of ``size``: a read resumed after a cancellation decodes the same
    batches as one never interrupted, so it leaves the same KV state (batch edges can move the last bits)."""
    while start < stop:
        end = min(stop, (start // size + 1) * size)
        yield start, end
        start = end


def _save(llama: Any) -> bytes:
    import llama_cpp

    ctx = llama.ctx
    size = llama_cpp.llama_state_seq_get_size(ctx, 0)
    buf = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
    return bytes(buf)[:written]


def _load(llama: Any, state: PrefixState, name: str) -> bool:
    import llama_cpp

    llama.reset()
    drop_from(llama, 0, seq=-1)
    buf = (ctypes.c_uint8 * len(state.data)).from_buffer_copy(state.data)
    if llama_cpp.llama_state_seq_set_data(llama.ctx, buf, len(state.data), 0) != len(state.data):
        log.warning("llama.cpp refused a stored document state for %s; reading the document again", name)
        return False
    mark_held(llama, len(state.tokens), tokens=state.tokens)  # no logits: the next call re-reads one token
    return True


class KeptPrefixes:
    """Where document states are kept for one model: ``memory`` always, ``disk`` when given."""

    def __init__(self, memory: MemoryPrefixStore, disk: DiskPrefixStore | None, *, fingerprint: str, name: str):
        self.memory, self.disk = memory, disk
        self.fingerprint, self.name = fingerprint, name

    def where(self, llama: Any, tokens: list[int]) -> str:
        """Where the state after ``tokens`` would come from now: resident, memory, disk or none."""
        if holds(llama, tokens):
            return "resident"
        key = prefix_key(self.fingerprint, tokens)
        if self.memory.get(key) is not None:
            return "memory"
        if self.disk is not None and self.disk.contains(key):
            return "disk"
        return "none"

    def restore(self, llama: Any, tokens: list[int], *, n_ctx: int, check: Callable[[], None]) -> str:
        """Make the state after ``tokens`` current, reading them only if no store holds it; says from where.
        ``check`` is called between slices of a read (see :func:`read_tokens`): a cancelled read stores nothing."""
        if holds(llama, tokens):
            return "resident"
        if len(tokens) + 1 > n_ctx:
            return "too long"  # the call itself will name the problem
        key = prefix_key(self.fingerprint, tokens)
        state = self.memory.get(key)
        source = "memory"
        if state is None and self.disk is not None:
            state = self.disk.get(key, self.fingerprint)
            source = "disk"
        if state is not None and tuple(tokens) == state.tokens and _load(llama, state, self.name):
            if source == "disk":
                self.memory.put(key, state)
            return source
        read_tokens(llama, tokens, check=check, keep=0)
        state = PrefixState(tuple(tokens), _save(llama))
        self.memory.put(key, state)
        if self.disk is not None:
            self.disk.put(key, self.fingerprint, state)
        return "read"
