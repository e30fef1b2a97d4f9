"""Read once, ask many: KV states of prompt prefixes (a document already read), in memory and on disk.

A state is keyed by the model's fingerprint (its file's SHA-256) and the exact prefix tokens, so
a changed model or a changed document never meets another's state. The memory store keeps the
most recently used states within a byte cap; the disk store is a size-capped LRU of files in the
user cache dir, one file per state, each with a checksum of its payload. A file that fails its
checksum, is truncated or does not parse is deleted with one warning and the prefix is read
again; it is never trusted. A cache dir that cannot be written leaves the memory store working.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragfunnel.atomic import atomic_open

log = logging.getLogger(__name__)

FORMAT = "ragfunnel-kv-1"
DEFAULT_MEMORY_BYTES = 3 << 30
DEFAULT_DISK_BYTES = 8 << 30


@dataclass(frozen=True)
class PrefixState:
    """A model's KV state after reading ``tokens`` (one sequence, as llama.cpp serialises it)."""

    tokens: tuple[int, ...]
    data: bytes


def prefix_key(fingerprint: str, tokens: tuple[int, ...] | list[int]) -> str:
    digest = hashlib.sha256(fingerprint.encode())
    digest.update(np.asarray(tokens, dtype=np.int32).tobytes())
    return digest.hexdigest()


def _checksum(*parts: bytes) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for p in parts:
        digest.update(p)
    return digest.hexdigest()


class MemoryPrefixStore:
    """Most recently used states within ``max_bytes``."""

    def __init__(self, *, max_bytes: int = DEFAULT_MEMORY_BYTES):
        self.max_bytes = max_bytes
        self._states: OrderedDict[str, PrefixState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> PrefixState | None:
        with self._lock:
            state = self._states.get(key)
            if state is not None:
                self._states.move_to_end(key)
            return state

    def put(self, key: str, state: PrefixState) -> None:
        if len(state.data) > self.max_bytes:
            return
        with self._lock:
            self._states[key] = state
            self._states.move_to_end(key)
            while sum(len(s.data) for s in self._states.values()) > self.max_bytes:
                self._states.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._states.clear()


class DiskPrefixStore:
    """States as files ``<root>/<key>.kv``: a JSON header line, the int32 tokens, the state bytes.

    Least recently used files go first once the store holds more than ``max_bytes``.
    """

    def __init__(self, root: str | Path, *, max_bytes: int = DEFAULT_DISK_BYTES):
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._writable: bool | None = None

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.kv"

    def contains(self, key: str) -> bool:
        return self._path(key).is_file()

    def get(self, key: str, fingerprint: str) -> PrefixState | None:
        path = self._path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("cannot read cached document state %s (%s); reading the document again", path, e)
            return None
        state = self._parse(raw, fingerprint)
        if state is None or prefix_key(fingerprint, state.tokens) != key:
            log.warning("cached document state %s is damaged; deleted, reading the document again", path.name)
            path.unlink(missing_ok=True)
            return None
        try:
            os.utime(path)  # most recently used
        except OSError:
            pass
        return state

    @staticmethod
    def _parse(raw: bytes, fingerprint: str) -> PrefixState | None:
        end = raw.find(b"\n")
        try:
            head = json.loads(raw[:end])
            n_tokens, n_bytes = int(head["tokens"]), int(head["bytes"])
            if head["format"] != FORMAT or head["model"] != fingerprint:
                return None
        except (ValueError, KeyError, TypeError):
            return None
        body = raw[end + 1:]
        if end < 0 or len(body) != 4 * n_tokens + n_bytes:
            return None
        tokens_raw, data = body[: 4 * n_tokens], body[4 * n_tokens:]
        if _checksum(tokens_raw, data) != head.get("checksum"):
            return None
        return PrefixState(tuple(int(t) for t in np.frombuffer(tokens_raw, dtype=np.int32)), data)

    def put(self, key: str, fingerprint: str, state: PrefixState) -> None:
        if self._writable is False or len(state.data) > self.max_bytes:
            return
        tokens_raw = np.asarray(state.tokens, dtype=np.int32).tobytes()
        head = {"format": FORMAT, "model": fingerprint, "tokens": len(state.tokens), "bytes": len(state.data),
                "checksum": _checksum(tokens_raw, state.data)}
        path = self._path(key)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with atomic_open(path, "wb") as f:
                f.write(json.dumps(head).encode() + b"\n")
                f.write(tokens_raw)
                f.write(state.data)
            self._writable = True
        except OSError as e:
            log.warning("cannot write document states under %s (%s); keeping them in memory only", self.root, e)
            self._writable = False
            return
        self._evict()

    def _evict(self) -> None:
        files = []
        for p in self.root.glob("*.kv"):
            try:
                st = p.stat()
            except OSError:
                continue
            files.append((st.st_mtime, st.st_size, p))
        total = sum(size for _, size, _ in files)
        for _, size, p in sorted(files):
            if total <= self.max_bytes:
                break
            p.unlink(missing_ok=True)
            total -= size

    def size(self) -> tuple[int, int]:
        """Files and bytes held."""
        files = [p.stat().st_size for p in self.root.glob("*.kv")] if self.root.is_dir() else []
        return len(files), sum(files)

    def clear(self) -> int:
        removed = 0
        for p in self.root.glob("*.kv") if self.root.is_dir() else []:
            p.unlink(missing_ok=True)
            removed += 1
        return removed


_default: DiskPrefixStore | None = None


def default_prefix_store() -> DiskPrefixStore:
    """The process's store of document states in the user cache dir (``kv/``)."""
    global _default
    if _default is None:
        from ragfunnel.llm.cache_paths import cache_dir

        _default = DiskPrefixStore(cache_dir() / "kv")
    return _default
