"""What a llama.cpp context holds: tokens read with the common prefix reused, and document prefixes
kept and restored.

A document prefix (instructions and document, before the question) is read once; the KV state
after it is kept in memory and on disk (:mod:`ragfunnel.llm.prefix_store`), keyed by the model
file's SHA-256 and the exact prefix tokens, and restored for the next question instead of reading
the document again. Every function here takes llama-cpp-python's ``Llama`` and works on sequence 0.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

from ragfunnel.llm.prefix_store import DiskPrefixStore, MemoryPrefixStore, PrefixState, prefix_key

log = logging.getLogger(__name__)


def holds(llama: Any, tokens: list[int]) -> bool:
    """Whether the context already holds ``tokens`` at its start."""
    n = len(tokens)
    return llama is not None and llama.n_tokens >= n and list(llama.input_ids[:n]) == tokens


def read_tokens(llama: Any, tokens: list[int], *, keep: int | None = None) -> None:
    """Make sequence 0 hold ``tokens`` with fresh logits for the last one.

    ``keep``: tokens of the current state to keep (None: as many as ``tokens`` shares with it,
    always re-reading the last one so that its logits are fresh).
    """
    common = 0
    if keep is None:
        limit = min(llama.n_tokens, len(tokens) - 1)
        while common < limit and llama.input_ids[common] == tokens[common]:
            common += 1
    else:
        common = keep
    llama._ctx.kv_cache_seq_rm(0, common, -1)
    llama.n_tokens = common
    llama.eval(tokens[common:])


def _save(llama: Any) -> bytes:
    import llama_cpp

    ctx = llama._ctx.ctx
    size = llama_cpp.llama_state_seq_get_size(ctx, 0)
    buf = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
    return bytes(buf)[:written]


def _load(llama: Any, state: PrefixState, name: str) -> bool:
    import llama_cpp

    llama.reset()
    llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llama._ctx.ctx), -1, -1, -1)
    buf = (ctypes.c_uint8 * len(state.data)).from_buffer_copy(state.data)
    if llama_cpp.llama_state_seq_set_data(llama._ctx.ctx, buf, len(state.data), 0) != len(state.data):
        log.warning("llama.cpp refused a stored document state for %s; reading the document again", name)
        return False
    n = len(state.tokens)
    llama.input_ids[:n] = state.tokens
    llama.n_tokens = n
    llama._requires_eval = True  # the restored state has no logits: the next call re-reads one token
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

    def restore(self, llama: Any, tokens: list[int], *, n_ctx: int) -> str:
        """Make the state after ``tokens`` current, reading them only if no store holds it; says from where."""
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
        read_tokens(llama, tokens, keep=0)
        state = PrefixState(tuple(tokens), _save(llama))
        self.memory.put(key, state)
        if self.disk is not None:
            self.disk.put(key, self.fingerprint, state)
        return "read"
