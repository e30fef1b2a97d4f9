"""An on-disk cache of LLM calls: the same call to the same weights answers from SQLite.

A call is keyed by the SHA-256 of a canonical JSON of (model fingerprint, full prompt, every
:class:`SamplingParams` field, ``n``). The fingerprint of a model with a weights file is that file's
SHA-256, so a changed file gets new keys and its old entries are never served.

One table, one row per call: the key, the fingerprint and name of the model, the time it was stored,
the completions as JSON, and a SHA-256 over key and value. A row whose checksum or JSON does not hold
(a torn write, a disk error, a hand edit) is deleted and recomputed, with one warning. SQLite runs in
WAL mode with every statement its own transaction, so a crash loses at most the call in flight.

The cache never stops an answer: a cache file that cannot be opened or written turns the cache off
for the process with one warning; a file that is not a database (or is damaged) is replaced by an
empty one.

Served completions carry ``cached=True`` and ``seconds`` = the time the lookup took (split over the
``n`` samples, as backends split one request's time), so traces show what this run really spent.
The stored row keeps the seconds the original call took.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragfunnel.errors import ConfigError
from ragfunnel.llm.cache_paths import cache_dir
from ragfunnel.types import Completion

if TYPE_CHECKING:
    from ragfunnel.types import SamplingParams

log = logging.getLogger(__name__)

CALLS_FILE = "calls.sqlite"
_SCHEMA = 1  # PRAGMA user_version; a file of another version is emptied, its rows would not decode
_KEY_VERSION = "ragfunnel-call/1"
_STORED = tuple(f.name for f in fields(Completion) if f.name != "cached")
_OPTIONAL = {"logprobs"}  # stored since a later version: entries written before lack it
_TYPES = {"text": str, "prompt_tokens": int, "completion_tokens": int, "seconds": (int, float), "finish_reason": str}
_DAMAGED = ("SQLITE_NOTADB", "SQLITE_CORRUPT")

_CREATE = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,   -- SHA-256 of the canonical call (call_key)
    model TEXT NOT NULL,    -- the model's fingerprint
    name TEXT NOT NULL,     -- the model's name when stored, for `ragfunnel cache info|clear`
    created REAL NOT NULL,  -- unix time
    value BLOB NOT NULL,    -- JSON list of completions (UTF-8)
    checksum TEXT NOT NULL  -- SHA-256 of key and value
)
"""


def call_key(fingerprint: str, prompt: str, params: SamplingParams, n: int) -> str:
    """The SHA-256 naming one call. Every SamplingParams field takes part, so a new field changes keys."""
    settings = {}
    for f in fields(params):
        if f.name == "keep_prefix":  # where to keep model state, not what to generate
            continue
        value = getattr(params, f.name)
        # 0 and 0.0 (or a numpy scalar) are the same setting and must give the same key
        if f.type in ("float", float):
            value = float(value)
        elif f.type in ("int", int):
            value = int(value)
        elif isinstance(value, tuple):
            value = list(value)
        settings[f.name] = value
    canonical = json.dumps([_KEY_VERSION, fingerprint, prompt, settings, int(n)], sort_keys=True,
                           ensure_ascii=False, separators=(",", ":"), default=repr)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _checksum(key: str, value: bytes) -> str:
    return hashlib.sha256(key.encode() + b"\0" + value).hexdigest()


@dataclass(frozen=True)
class CachedModel:
    """The entries of one model fingerprint, and the names the model had when they were stored."""

    fingerprint: str
    names: tuple[str, ...]
    entries: int


@dataclass(frozen=True)
class CacheInfo:
    path: str
    entries: int
    bytes: int  # the database file and its write-ahead log
    models: tuple[CachedModel, ...]  # most entries first


class CallCache:
    """LLM completions on disk, keyed by call. Safe to share between threads.

    ``strict=True`` (the ``ragfunnel cache`` command) raises :class:`ConfigError` when the file cannot
    be opened; otherwise that is one warning and a cache that stores and serves nothing.
    """

    def __init__(self, path: str | Path, *, strict: bool = False, timeout: float = 10.0):
        self.path = Path(path)
        self._strict = strict
        self._timeout = timeout  # waiting for another process's write
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self.disabled_reason: str | None = None
        with self._lock:
            self._open()

    @property
    def enabled(self) -> bool:
        return self._conn is not None

    def get(self, fingerprint: str, prompt: str, params: SamplingParams, n: int) -> list[Completion] | None:
        """The stored completions of this call, or None (not stored, damaged, or the cache is off)."""
        started = time.perf_counter()
        key = call_key(fingerprint, prompt, params, n)
        with self._lock:
            if self._conn is None:
                return None
            try:
                row = self._conn.execute("SELECT value, checksum, name FROM calls WHERE key = ?", (key,)).fetchone()
                if row is None:
                    return None
                stored, problem = _decode(key, *row[:2])
                if problem is not None:
                    log.warning("call cache: the entry of a %s call in %s is damaged (%s); calling the model again",
                                row[2], self.path, problem)
                    self._conn.execute("DELETE FROM calls WHERE key = ?", (key,))
                    return None
            except sqlite3.Error as e:
                self._fail(e)
                return None
        share = (time.perf_counter() - started) / len(stored)
        return [Completion(**{**s, "seconds": share}, cached=True) for s in stored]

    def put(self, fingerprint: str, prompt: str, params: SamplingParams, n: int, completions: Sequence[Completion],
            *, name: str = "") -> None:
        """Store what the call returned (its own seconds included). A call that wrote nothing is not stored:
        an empty answer is more often a fault (a damaged kept state, a stopped generation) than the answer."""
        if not completions or any(not c.text.strip() for c in completions):
            return
        key = call_key(fingerprint, prompt, params, n)
        value = json.dumps([{k: getattr(c, k) for k in _STORED} for c in completions], ensure_ascii=False,
                           separators=(",", ":")).encode()
        with self._lock:
            if self._conn is None:
                return
            try:
                self._conn.execute("INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?, ?, ?)",
                                   (key, fingerprint, name or fingerprint, time.time(), value, _checksum(key, value)))
            except sqlite3.Error as e:
                self._fail(e)

    def info(self) -> CacheInfo:
        """How many entries, for which models, and the bytes on disk."""
        with self._lock:
            try:
                rows = [] if self._conn is None else self._conn.execute(
                    "SELECT model, name, count(*) FROM calls GROUP BY model, name").fetchall()
            except sqlite3.Error as e:
                raise ConfigError(f"cannot read the call cache {self.path} ({e}); "
                                  "`ragfunnel cache clear` starts it afresh") from None
        by_model: dict[str, tuple[list[str], int]] = {}
        for model, name, count in rows:
            names, total = by_model.get(model, ([], 0))
            by_model[model] = ([*names, name], total + count)
        models = sorted((CachedModel(m, tuple(sorted(names)), total) for m, (names, total) in by_model.items()),
                        key=lambda m: (-m.entries, m.fingerprint))
        size = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        return CacheInfo(str(self.path), sum(m.entries for m in models), size, tuple(models))

    def clear(self, model: str | None = None) -> int:
        """Delete every entry, or those of ``model`` (a fingerprint, or the name it was stored under).

        Returns how many entries were removed.
        """
        with self._lock:
            if self._conn is None:
                return 0
            try:
                if model is None:
                    removed = self._conn.execute("DELETE FROM calls").rowcount
                else:
                    removed = self._conn.execute("DELETE FROM calls WHERE model = ? OR name = ?",
                                                 (model, model)).rowcount
            except sqlite3.Error as e:
                if getattr(e, "sqlite_errorname", "") not in _DAMAGED:
                    raise ConfigError(f"cannot clear the call cache {self.path} ({e})") from None
                log.warning("call cache %s is damaged (%s); replacing it with an empty one", self.path, e)
                try:
                    self._recreate()
                except (OSError, sqlite3.Error) as again:
                    raise ConfigError(f"cannot replace the damaged call cache {self.path} ({again}); "
                                      "delete the file by hand") from None
                return 0
            try:
                if removed:
                    self._conn.execute("VACUUM")  # give the space back
            except sqlite3.OperationalError:
                pass  # another process is reading: the space is reused by later entries instead
            return removed

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _open(self) -> None:
        try:
            try:
                self._connect()
            except sqlite3.DatabaseError as e:
                if getattr(e, "sqlite_errorname", "") not in _DAMAGED:
                    raise
                log.warning("call cache %s is damaged (%s); replacing it with an empty one", self.path, e)
                self._recreate()
        except (OSError, sqlite3.Error) as e:
            self._conn = None
            self.disabled_reason = f"cannot use the call cache {self.path} ({e})"
            if self._strict:
                raise ConfigError(f"{self.disabled_reason}; make the directory writable or point "
                                  "RAGFUNNEL_CACHE at one that is") from None
            log.warning("%s; running without it (set RAGFUNNEL_CACHE to a writable directory)",
                        self.disabled_reason)

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            # In WAL mode a crashed process keeps every stored call; a power cut may lose the last few,
            # and never leaves the file corrupt.
            conn.execute("PRAGMA synchronous=NORMAL")
            if conn.execute("PRAGMA user_version").fetchone()[0] != _SCHEMA:
                conn.execute("BEGIN IMMEDIATE")  # another process may be creating the table right now
                try:
                    if conn.execute("PRAGMA user_version").fetchone()[0] != _SCHEMA:
                        conn.execute("DROP TABLE IF EXISTS calls")
                        conn.execute(_CREATE)
                        conn.execute(f"PRAGMA user_version = {_SCHEMA}")
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            conn.execute("SELECT count(*) FROM calls").fetchone()  # reads every key page: finds a truncated file
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _recreate(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self._connect()

    def _fail(self, e: sqlite3.Error) -> None:
        """A read or write failed mid-run: a damaged file is replaced, anything else (disk full, a lock held
        too long, a read-only file) turns the cache off for the rest of the run."""
        if getattr(e, "sqlite_errorname", "") in _DAMAGED:
            log.warning("call cache %s is damaged (%s); replacing it with an empty one", self.path, e)
            try:
                self._recreate()
                return
            except (OSError, sqlite3.Error) as again:
                e = again
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.disabled_reason = f"the call cache {self.path} failed ({e})"
        log.warning("%s; running without it for the rest of this run", self.disabled_reason)


def _decode(key: str, value: Any, checksum: Any) -> tuple[list[dict[str, Any]], str | None]:
    """The stored completions as Completion keyword arguments, or why the row cannot be trusted."""
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, bytes):
        return [], f"its value is {type(value).__name__}, not bytes"
    if checksum != _checksum(key, value):
        return [], "checksum mismatch"
    try:
        stored = json.loads(value)
    except ValueError as e:
        return [], f"undecodable JSON: {e}"
    if not isinstance(stored, list) or not stored:
        return [], "not a list of completions"
    for s in stored:
        if not isinstance(s, dict) or not set(_STORED) - _OPTIONAL <= set(s) <= set(_STORED):
            return [], "a completion with the wrong fields"
        if "logprobs" in s:
            if not isinstance(s["logprobs"], list) or not all(isinstance(v, int | float) for v in s["logprobs"]):
                return [], "a completion with a field of the wrong type"
            s["logprobs"] = tuple(float(v) for v in s["logprobs"])
        if not all(isinstance(s[k], t) for k, t in _TYPES.items() if k in s):
            return [], "a completion with a field of the wrong type"
    return stored, None


_shared: dict[Path, CallCache | None] = {}
_shared_lock = threading.Lock()


def default_call_cache() -> CallCache | None:
    """The process's cache at ``cache_dir()/calls.sqlite``, opened once; None if it cannot be used."""
    path = cache_dir() / CALLS_FILE
    with _shared_lock:
        if path not in _shared:
            cache = CallCache(path)
            _shared[path] = cache if cache.enabled else None
        return _shared[path]
