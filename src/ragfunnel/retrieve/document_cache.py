"""A book read once: the work on a context that no question changes, kept across processes.

Every method begins the same way over a context: cut it into word windows, count each chunk's tokens, build BM25
over the chunks, and embed the chunks the shared ranking needs with MiniLM. None of it depends on the question,
so it is kept here by content, and a second question about a long document (in another process: ``ask``, a fresh
Python process, ``eval`` rows sharing a context) starts from it. ``serve`` and MCP use the same functions.

An *entry* is one text cut one way. Its key is the SHA-256 of :data:`FORMAT`, ragfunnel's version, the chunk
words, the chunks' ``doc_id`` and the text's own SHA-256. It lives in ``cache_dir()/documents/<key>/``:

- ``meta.json``: the chunks, as character spans of the text and their word counts (the text is not kept: the
  caller has it, and the key proves it is the same text);
- ``tokens-<id>.npy``: each chunk's token count under one tokenizer and, last, the whole text's (-1: not
  counted yet); ``<id>`` hashes the model's ``tokenizer_identity`` (for llama.cpp, its version and the GGUF
  file's SHA-256), so each tokenizer used has its own file. A model without one (a server, a test's fake)
  keeps its counts in memory only;
- ``bm25-<id>.npz``: the chunks' BM25 term ids (ids, lengths, terms), for the BM25 tokeniser's identity
  (:func:`ragfunnel.retrieve.bm25.tokeniser_identity`);
- ``vectors-<id>.npz``: an embedder's vectors of the pieces embedded so far, by each piece's SHA-1, for the
  embedder's identity: added to, never recomputed.

Each file is written whole or not at all (:mod:`ragfunnel.atomic`), so a reader never sees a torn file.
``meta.json`` and ``bm25-*.npz`` hold what their name and the entry's key decide: two processes writing one
write the same bytes. ``tokens-*.npy`` and ``vectors-*.npz`` grow: each write merges what this process has with
the file on disk just before, so a count or vector another process wrote between that read and the rename can
be lost, and is then computed again later; a count or vector is never wrong. The code that cuts chunks and
makes BM25 terms is pinned by a test to :data:`FORMAT`.

Files are read within bounds (:mod:`ragfunnel.bounded`), each part by the size its entry allows, never through a
symbolic link, and arrays are parsed here (no pickle, and a header is checked against the bytes that follow it
before anything is allocated). The entries stay within ``max_bytes`` together: past it, the least recently used
(by when their ``meta.json`` was last read or written) are removed. A part that does not parse or check out is
removed with one warning and computed again (a ``meta.json``: the whole entry); one from another format or
version is never found, its key differs. A cache directory that cannot be written (read-only, full) or read, or
a cache dir setting that names a file, costs one warning per process, and answers come as they would without
it. With the disk caches off (``--no-cache``, :func:`ragfunnel.llm.set_disk_caches`) nothing is read or written;
the last few documents' parts are kept in memory either way.

:func:`document_chunks` returns a fresh list of an entry's :class:`~ragfunnel.types.Chunk` objects; the functions
given chunks (:func:`chunk_tokens`, :func:`chunk_bm25`, :func:`kept_vectors`) find the entry by those objects'
identity, so a list that is not a document's chunks in order (a selection, another chunking) is worked on as
without the cache. Results are the same with and without it, whatever it holds: the same chunks, counts, BM25
scores and vectors, and the same whole-text count for auto's plan (:meth:`DocumentCache.text_tokens`).
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import math
import os
import secrets
import shutil
import stat
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ragfunnel.atomic import write_atomic
from ragfunnel.bounded import CannotOpen, RefusedPath, UnreadableFile, read_json_file, read_regular_file
from ragfunnel.errors import ConfigError
from ragfunnel.llm.base import LLM
from ragfunnel.retrieve.bm25 import BM25Index, TokenIds, index_token_ids, tokeniser_identity, tokenize_ids
from ragfunnel.text.chunking import CHUNK_WORDS, chunk_words
from ragfunnel.types import Chunk
from ragfunnel.version import __version__

log = logging.getLogger(__name__)
T = TypeVar("T")

FORMAT = "ragfunnel-document-1"  # raise it when the chunker, or what a file holds, changes
DIRECTORY = "documents"
DEFAULT_MAX_BYTES = 1 << 30  # a 1.2 MB book's entry is a few MB: hundreds of books
MEMORY_DOCUMENTS = 4  # documents whose parts each process keeps in memory
META = "meta.json"
PIECE_KEY_BYTES = 20  # SHA-1 of a piece's text, as the in-process vectors are kept by
# A whole-text count differs from the sum of its chunks' counts only where the chunks meet (the whitespace
# between them, a first word read with the space before it): within this many tokens per boundary.
BOUNDARY_TOKENS = 2
COUNT_BATCH = 256  # chunks counted at a time when only whether they pass a limit is asked (tokens_past)
_HEX = frozenset("0123456789abcdef")
# Bytes a part may hold beyond its arrays' data: an .npy header (ours are 128), a zip's headers and directory.
_NPY_HEADER = 4096
_ZIP_OVERHEAD = 1024


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def entry_key(text: str, *, words: int, doc_id: str = "context") -> str:
    """The name of the entry of ``text`` cut into ``words``-word chunks: what decides the chunks, hashed."""
    canonical = json.dumps([FORMAT, __version__, int(words), doc_id, text_digest(text)], separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def part_id(identity: str) -> str:
    """A file name's share of a tokenizer's, tokeniser's or embedder's identity."""
    return hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass(frozen=True)
class DocumentCacheInfo:
    path: str
    entries: int
    bytes: int
    max_bytes: int


@dataclass(eq=False)
class _Entry:
    """One document's parts in memory; ``chunks`` are the objects every list handed out holds."""

    key: str
    chunks: tuple[Chunk, ...]
    boundaries: int  # places a whole-text count may differ from the chunks' sum (see BOUNDARY_TOKENS)
    chars: int  # the text's length, which bounds what its parts' files may hold
    tokens: dict[str, np.ndarray] = field(default_factory=dict)  # part id -> counts, the whole text's last
    bm25: dict[str, BM25Index] = field(default_factory=dict)
    vectors: dict[str, dict[bytes, np.ndarray]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def n_words(self) -> int:
        return sum(c.n_words for c in self.chunks)


class Damaged(Exception):
    """A cache file that does not check out; its message says why in a few words."""


class DocumentCache:
    """Per-document work in memory and under ``root`` (None: where :func:`default_root` says, now). Safe to share
    between threads."""

    def __init__(self, root: str | Path | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 memory_documents: int = MEMORY_DOCUMENTS):
        self._root = None if root is None else Path(root)
        self.max_bytes = max_bytes
        self._memory: OrderedDict[str, _Entry] = OrderedDict()
        self._capacity = memory_documents
        self._lock = threading.Lock()
        self._unwritable: Path | None = None  # a root that could not be written: not tried again
        self._warned_unreadable = False
        self._warned_no_root = False

    @property
    def root(self) -> Path | None:
        """Where entries are kept now (None: in memory only, as when the cache dir setting names a file)."""
        if self._root is not None:
            return self._root
        try:
            return default_root()
        except ConfigError as e:
            if not self._warned_no_root:
                self._warned_no_root = True
                log.warning("%s; keeping document work in memory only", e)
            return None

    # -- what methods ask for -----------------------------------------------------------------------

    def chunks(self, text: str, *, words: int = CHUNK_WORDS, doc_id: str = "context") -> list[Chunk]:
        """``text`` (a checked context) cut into ``words``-word chunks, as :func:`~ragfunnel.text.chunk_words` cuts
        it, from the cache when it holds them."""
        return list(self._entry(text, words=words, doc_id=doc_id).chunks)

    def chunk_tokens(self, chunks: list[Chunk], llm: LLM) -> list[int]:
        """Each chunk's tokens under ``llm``'s tokenizer; the chunks not counted before are counted together."""
        entry = self._entry_of(chunks)
        if entry is None:
            return llm.count_tokens_many([c.text for c in chunks])
        return self._chunk_counts(entry, llm)

    def tokens_past(self, chunks: list[Chunk], llm: LLM, limit: int, *, slack: int = 0) -> bool:
        """Whether the chunks' tokens under ``llm``, less ``slack`` for each chunk and one more, sum past ``limit``.

        The chunks are counted in document order, :data:`COUNT_BATCH` at a time, only until the answer is known:
        a book far past a window is known to be past it from its first few hundred chunks. The answer is the one
        the whole sum gives (a later chunk only adds), and what was counted is kept as :meth:`chunk_tokens` keeps it.
        """
        floor = limit + slack * (len(chunks) + 1)
        entry = self._entry_of(chunks)
        total = 0
        for start in range(0, len(chunks), COUNT_BATCH):
            batch = range(start, min(start + COUNT_BATCH, len(chunks)))
            if entry is None:
                total += sum(llm.count_tokens_many([chunks[i].text for i in batch]))
            else:
                total += sum(self._chunk_counts(entry, llm, only=batch))
            if total > floor:
                return True
        return False

    def text_tokens(self, text: str, llm: LLM, *, words: int = CHUNK_WORDS, exact_up_to: int | None = None) -> int:
        """The whole text's tokens under ``llm``'s tokenizer.

        Exact when ``exact_up_to`` is None or the text may hold that many tokens or fewer. Past it (a book, where
        the caller only needs to know it is long), it is the sum of the chunks' counts (which are needed anyway,
        and kept) plus one token for each place the chunks meet across more than one space: within
        :data:`BOUNDARY_TOKENS` of the exact count at each place the chunks meet, and only returned when even
        that error leaves it past ``exact_up_to``. The estimate is tested before any kept exact count is looked
        at, so the answer is the same whatever the cache holds.
        """
        entry = self._entry(text, words=words)
        if exact_up_to is not None:
            estimate = sum(self._chunk_counts(entry, llm)) + entry.boundaries
            if estimate - BOUNDARY_TOKENS * (len(entry.chunks) + 1) > exact_up_to:
                return estimate
        identity = llm.tokenizer_identity
        if identity is None:
            return llm.count_tokens(text)
        name = f"tokens-{part_id(identity)}.npy"
        with entry.lock:
            kept = int(self._tokens(entry, name)[-1])
        if kept >= 0:
            return kept
        exact = llm.count_tokens(text)
        with entry.lock:
            counts = self._tokens(entry, name).copy()
            counts[-1] = exact
            self._keep_counts(entry, name, counts)
        return exact

    def chunk_bm25(self, chunks: list[Chunk]) -> BM25Index:
        """BM25 over the chunks' texts (identical to ``BM25Index([c.text for c in chunks])``)."""
        entry = self._entry_of(chunks)
        if entry is None:
            return BM25Index([c.text for c in chunks])
        name = f"bm25-{part_id(tokeniser_identity())}.npz"
        with entry.lock:
            if name not in entry.bm25:
                tokens = self._read_term_ids(entry, name)
                if tokens is None:
                    tokens = tokenize_ids(c.text for c in entry.chunks)
                    self._write(entry.key, name, _npz(ids=tokens.ids, lengths=tokens.lengths,
                                                      terms=_joined_terms(tokens.vocab)))
                entry.bm25[name] = index_token_ids(tokens)
            return entry.bm25[name]

    def kept_vectors(self, chunks: list[Chunk], embedder: str, *, width: int) -> KeptVectors | None:
        """The vectors ``embedder`` (its identity; vectors of ``width`` numbers) made of the pieces of ``chunks``'
        document so far, to read and add to; None when ``chunks`` are not a document's chunks."""
        entry = self._entry_of(chunks)
        return None if entry is None else KeptVectors(self, entry, f"vectors-{part_id(embedder)}.npz", width)

    # -- what `ragfunnel cache` asks for ---------------------------------------------------------

    def info(self) -> DocumentCacheInfo:
        root = self.root
        entries = _entries(root) if root is not None else []
        return DocumentCacheInfo(str(root), len(entries), sum(size for _, size, _ in entries), self.max_bytes)

    def clear(self) -> int:
        """Remove every entry (and what a killed writer left); returns how many entries were removed."""
        with self._lock:
            self._memory.clear()
        root = self.root
        if root is None or not root.is_dir():
            return 0
        removed = 0
        for path in root.iterdir():
            if _is_entry(path):
                removed += _remove(path)
            elif path.name.startswith(".") and ".removing." in path.name and path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
        return removed

    # -- entries ----------------------------------------------------------------------------------

    def _entry(self, text: str, *, words: int, doc_id: str = "context") -> _Entry:
        key = entry_key(text, words=words, doc_id=doc_id)
        with self._lock:
            entry = self._memory.get(key)
            if entry is not None:
                self._memory.move_to_end(key)
        if entry is None:
            entry = self._read_entry(key, text, words=words, doc_id=doc_id)
            if entry is None:
                chunks = chunk_words(text, chunk_words=words, doc_id=doc_id)
                entry = _Entry(key, tuple(chunks), _boundaries(text, chunks), len(text))
                self._write(key, META, json.dumps(_meta(key, text, words, doc_id, chunks)).encode())
            with self._lock:
                entry = self._memory.setdefault(key, entry)  # another thread's, if it was first
                self._memory.move_to_end(key)
                while len(self._memory) > self._capacity:
                    self._memory.popitem(last=False)
        else:
            self._touch(key)
        return entry

    def _entry_of(self, chunks: list[Chunk]) -> _Entry | None:
        """The entry whose chunks these are, in order (the same objects), or None."""
        if not chunks:
            return None
        with self._lock:
            entries = list(self._memory.values())
        for entry in reversed(entries):
            held = entry.chunks
            if len(held) == len(chunks) and held[0] is chunks[0] \
                    and all(a is b for a, b in zip(held, chunks, strict=True)):
                return entry
        return None

    def _read_entry(self, key: str, text: str, *, words: int, doc_id: str) -> _Entry | None:
        chunks = self.read_meta(key, max_bytes=_meta_bytes(text, words, doc_id),
                                 parse=lambda meta: _chunks_from(meta, key, text, words=words, doc_id=doc_id))
        return None if chunks is None else _Entry(key, tuple(chunks), _boundaries(text, chunks), len(text))

    def read_meta(self, key: str, *, max_bytes: int, parse: Callable[[Any], T]) -> T | None:
        """``parse`` of the entry ``key``'s ``meta.json`` (marked used now); None when there is none, or it cannot be
        read, or it does not parse (``parse`` raises :class:`Damaged`: then the entry is removed, with one
        warning)."""
        root = self.root
        if root is None:
            return None
        directory = root / key
        if directory.is_symlink():
            self._damaged(directory, "a symbolic link, not a directory ragfunnel wrote")
            return None
        try:
            meta = read_json_file(directory / META, max_bytes=min(self.max_bytes, max_bytes),
                                  what="document cache entry", follow_symlinks=False)
            parsed = parse(meta)
        except FileNotFoundError:
            return None
        except CannotOpen as e:
            self._cannot_read(root, e.problem)
            return None
        except UnreadableFile as e:
            self._damaged(directory, e.problem)
            return None
        except Damaged as e:
            self._damaged(directory, str(e))
            return None
        except OSError as e:  # the read itself failed (an I/O error): the entry may be fine
            self._cannot_read(root, e.strerror or str(e))
            return None
        self._touch(key)
        return parsed

    def write_meta(self, key: str, record: Any) -> None:
        """Write ``record`` (JSON) as the ``meta.json`` of the entry ``key``: for an entry of its own (a file's
        reading, :mod:`ragfunnel.documents.read_cache`), bounded and evicted like the others."""
        self._write(key, META, json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))

    def _chunk_counts(self, entry: _Entry, llm: LLM, *, only: range | None = None) -> list[int]:
        """Each of the entry's chunks' tokens under ``llm`` (``only``: of those chunks), counted once and kept where
        ``llm`` says what decides its counts."""
        wanted = range(len(entry.chunks)) if only is None else only
        identity = llm.tokenizer_identity
        if identity is None:
            return llm.count_tokens_many([entry.chunks[i].text for i in wanted])
        name = f"tokens-{part_id(identity)}.npy"
        with entry.lock:
            counts = self._tokens(entry, name)
            missing = [i for i in wanted if counts[i] < 0]
            if missing:
                counts = counts.copy()
                counts[missing] = llm.count_tokens_many([entry.chunks[i].text for i in missing])
                counts = self._keep_counts(entry, name, counts)
            return counts[wanted.start:wanted.stop].tolist()

    def _tokens(self, entry: _Entry, name: str) -> np.ndarray:
        """The entry's counts in ``name`` (memory, then disk; -1 where not counted). Called holding entry.lock."""
        counts = entry.tokens.get(name)
        if counts is None:
            counts = self._read_counts(entry, name)
            if counts is None:
                counts = np.full(len(entry.chunks) + 1, -1, dtype=np.int64)
            entry.tokens[name] = counts
        return counts

    def _keep_counts(self, entry: _Entry, name: str, counts: np.ndarray) -> np.ndarray:
        """Keep ``counts``, with those another process wrote meanwhile, in memory and on disk; returns them.
        Called holding entry.lock."""
        on_disk = self._read_counts(entry, name)
        if on_disk is not None:
            counts = np.where(counts >= 0, counts, on_disk)
        entry.tokens[name] = counts
        buffer = io.BytesIO()
        np.save(buffer, counts, allow_pickle=False)
        self._write(entry.key, name, buffer.getvalue())
        return counts

    def _read_counts(self, entry: _Entry, name: str) -> np.ndarray | None:
        n = len(entry.chunks)
        arrays = self._read_arrays(entry, name, lambda a: _check_tokens(a, n), max_bytes=_NPY_HEADER + 8 * (n + 1))
        return None if arrays is None else arrays["array"]

    def _read_term_ids(self, entry: _Entry, name: str) -> TokenIds | None:
        n = len(entry.chunks)
        # At most one term per character of the text as searched (Chinese cut into words gains spaces): ids,
        # and terms of up to 4 UTF-8 bytes each.
        bound = 3 * (_NPY_HEADER + _ZIP_OVERHEAD) + 8 * n + 16 * entry.chars
        arrays = self._read_arrays(entry, name, lambda a: _check_term_ids(a, n), max_bytes=bound)
        if arrays is None:
            return None
        terms = arrays["terms"].tobytes().decode("utf-8").split("\n") if arrays["terms"].size else []
        return TokenIds(arrays["ids"], arrays["lengths"], {t: i for i, t in enumerate(terms)})

    # -- files --------------------------------------------------------------------------------------

    def _read_arrays(self, entry: _Entry, name: str, check, *, max_bytes: int) -> dict[str, np.ndarray] | None:
        """The arrays of an entry's ``.npy`` (as ``array``) or ``.npz`` file of at most ``max_bytes``, checked by
        ``check(arrays)``; None when missing, unreadable or damaged (which removes the file, with one warning)."""
        root = self.root
        if root is None:
            return None
        directory = root / entry.key
        path = directory / name
        if directory.is_symlink():
            return None  # planted since the entry was read: not followed, and replaced at the next write
        try:
            data = read_regular_file(path, max_bytes=min(max_bytes, self.max_bytes), what="document cache file",
                                     follow_symlinks=False)
        except FileNotFoundError:
            return None
        except CannotOpen as e:
            self._cannot_read(root, e.problem)
            return None
        except RefusedPath as e:
            self._damaged_file(path, e.problem)
            return None
        except OSError as e:  # the read itself failed (an I/O error): the file may be fine
            self._cannot_read(root, e.strerror or str(e))
            return None
        try:
            arrays = _load_arrays(data, npz=name.endswith(".npz"))
            check(arrays)
        except Exception as e:  # whatever a damaged file makes numpy or zipfile raise (BadZipFile, zlib.error,
            # MemoryError...): never the caller's problem
            self._damaged_file(path, str(e) or type(e).__name__)
            return None
        return arrays

    def _write(self, key: str, name: str, data: bytes) -> None:
        """Replace one file of an entry whole; a root that cannot be written is reported once and left alone."""
        root = self.root
        if root is None or root == self._unwritable or len(data) > self.max_bytes:
            return
        directory = root / key
        for attempt in range(2):
            try:
                _entry_directory(directory)
                write_atomic(directory / name, data)
                break
            except FileNotFoundError:  # another process removed the entry meanwhile: make it again, once
                if attempt:
                    return
            except OSError as e:
                self._unwritable = root
                reason = {errno.ENOSPC: "the disk is full", errno.EROFS: "read-only",
                          errno.EACCES: "not writable", errno.EPERM: "not writable"}.get(e.errno, str(e))
                log.warning("cannot keep document work under %s (%s); answering without it for the rest of this "
                            "run (set RAGFUNNEL_CACHE to a writable directory, or turn the disk caches off)",
                            root, reason)
                return
        self._evict(root, keep=key)

    def _touch(self, key: str) -> None:
        """Mark an entry used now, for the least-recently-used order."""
        root = self.root
        if root is None or root == self._unwritable:
            return
        try:
            os.utime(root / key / META, follow_symlinks=False)
        except OSError:
            pass  # removed meanwhile, or a read-only directory: the order is only a preference

    def _evict(self, root: Path, *, keep: str) -> None:
        """Remove the least recently used entries until the rest fit ``max_bytes`` (never ``keep``)."""
        entries = _entries(root)
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            if path.name != keep:
                _remove(path)
                total -= size

    def _damaged(self, directory: Path, problem: str) -> None:
        """An entry whose chunks cannot be trusted: removed whole, with its parts."""
        log.warning("the document cache entry %s is damaged (%s); removed, the document is read again",
                    directory, problem)
        _remove(directory)

    def _damaged_file(self, path: Path, problem: str) -> None:
        """One part of an entry that does not check out: removed, and computed again by the caller."""
        log.warning("the document cache file %s is damaged (%s); removed, its part is computed again", path, problem)
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only directory: it is written over when it can be

    def _cannot_read(self, root: Path, problem: str) -> None:
        if not self._warned_unreadable:
            self._warned_unreadable = True
            log.warning("cannot read the document cache under %s (%s); answering without it", root, problem)


class KeptVectors:
    """One embedder's vectors of one document's pieces, by the SHA-1 of each piece's text (:func:`piece_key`)."""

    def __init__(self, cache: DocumentCache, entry: _Entry, name: str, width: int):
        self._cache, self._entry, self._name, self._width = cache, entry, name, width

    def get(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        """The kept vectors among ``keys``."""
        with self._entry.lock:
            kept = self._kept()
            return {k: kept[k] for k in keys if k in kept}

    def add(self, vectors: dict[bytes, np.ndarray]) -> None:
        """Keep these as well (with those another process kept meanwhile) and write the file once."""
        if not vectors:
            return
        with self._entry.lock:
            kept = self._kept()
            for k, v in (self._read() or {}).items():
                kept.setdefault(k, v)
            kept.update((k, np.array(v, dtype=np.float32)) for k, v in vectors.items())
            keys = np.frombuffer(b"".join(kept), dtype=np.uint8).reshape(len(kept), PIECE_KEY_BYTES)
            self._cache._write(self._entry.key, self._name, _npz(keys=keys, vectors=np.stack(list(kept.values()))))

    def _kept(self) -> dict[bytes, np.ndarray]:
        kept = self._entry.vectors.get(self._name)
        if kept is None:
            kept = self._entry.vectors[self._name] = self._read() or {}
        return kept

    def _read(self) -> dict[bytes, np.ndarray] | None:
        # At most one piece per word of the document, each a key and a vector.
        bound = 2 * (_NPY_HEADER + _ZIP_OVERHEAD) + self._entry.n_words * (PIECE_KEY_BYTES + 4 * self._width)
        arrays = self._cache._read_arrays(self._entry, self._name, lambda a: _check_vectors(a, self._width),
                                          max_bytes=bound)
        if arrays is None:
            return None
        # Each row a copy of its own: a view would keep the whole file's array alive for as long as one row is.
        return {bytes(k): np.array(v) for k, v in zip(arrays["keys"], arrays["vectors"], strict=True)}


def piece_key(text: str) -> bytes:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()


def _meta(key: str, text: str, words: int, doc_id: str, chunks: list[Chunk]) -> dict:
    spans = [v for c in chunks for v in (c.start, c.start + len(c.text), c.n_words)]
    return {"format": FORMAT, "version": __version__, "key": key, "text_sha256": text_digest(text),
            "chars": len(text), "chunk_words": words, "doc_id": doc_id, "spans": spans}


def _meta_bytes(text: str, words: int, doc_id: str) -> int:
    """The most a ``meta.json`` of ``text`` can hold: at most a chunk per character, each three numbers."""
    per_chunk = 2 * (len(str(len(text))) + 2) + len(str(words)) + 2
    return 1024 + 6 * len(doc_id) + per_chunk * (len(text) + 1)


def _chunks_from(meta: object, key: str, text: str, *, words: int, doc_id: str) -> list[Chunk]:
    """The chunks a ``meta.json`` describes, each checked against ``text``; Damaged otherwise."""
    if not isinstance(meta, dict):
        raise Damaged("not a JSON object")
    written_for = (meta.get("format"), meta.get("version"), meta.get("key"), meta.get("text_sha256"),
                   meta.get("chars"), meta.get("chunk_words"), meta.get("doc_id"))
    if written_for != (FORMAT, __version__, key, text_digest(text), len(text), words, doc_id):
        raise Damaged("it describes another text, chunking or version than its name")
    spans = meta.get("spans")
    if not isinstance(spans, list) or len(spans) % 3 or not all(type(v) is int for v in spans):
        raise Damaged("its chunks are not a list of spans")
    chunks, previous_end = [], 0
    for position in range(len(spans) // 3):
        start, end, n_words = spans[3 * position: 3 * position + 3]
        if not previous_end <= start < end <= len(text) or not 1 <= n_words <= words:
            raise Damaged(f"chunk {position} lies outside the text or out of order")
        chunks.append(Chunk(id=f"{doc_id}#{position}", text=text[start:end], doc_id=doc_id, position=position,
                            n_words=n_words, start=start))
        previous_end = end
    if not chunks and text.strip():
        raise Damaged("it holds no chunks of a text with words")
    return chunks


def _boundaries(text: str, chunks: list[Chunk]) -> int:
    """How many places around the chunks hold more than one space: between two chunks, before the first, after the
    last. A whole-text count spends a token or two on each; a single space joins the next word's token."""
    ends = [(c.start, c.start + len(c.text)) for c in chunks]
    gaps = [text[a_end:b_start] for (_, a_end), (b_start, _) in zip(ends[:-1], ends[1:], strict=True)]
    outer = [text[: ends[0][0]], text[ends[-1][1]:]] if ends else [text]
    return sum(1 for g in gaps if g != " ") + sum(1 for g in outer if g)


def _check_tokens(arrays: dict[str, np.ndarray], n_chunks: int) -> None:
    if set(arrays) != {"array"}:
        raise Damaged("not one array of token counts")
    counts = arrays["array"]
    if counts.dtype != np.int64 or counts.shape != (n_chunks + 1,) or (counts < -1).any():
        raise Damaged(f"token counts of shape {counts.shape} and type {counts.dtype}, not {n_chunks + 1} int64s")


def _check_term_ids(arrays: dict[str, np.ndarray], n_chunks: int) -> None:
    if set(arrays) != {"ids", "lengths", "terms"}:
        raise Damaged(f"BM25 arrays {sorted(arrays)}, not ids, lengths and terms")
    ids, lengths, terms = arrays["ids"], arrays["lengths"], arrays["terms"]
    if ids.dtype != np.int32 or lengths.dtype != np.int64 or terms.dtype != np.uint8:
        raise Damaged("BM25 arrays of the wrong types")
    if lengths.shape != (n_chunks,) or ids.ndim != 1 or terms.ndim != 1 or (lengths < 0).any() \
            or ids.size != int(lengths.sum()):
        raise Damaged("BM25 term ids that do not match the chunks")
    try:
        n_terms = len(terms.tobytes().decode("utf-8").split("\n")) if terms.size else 0
    except UnicodeDecodeError:
        raise Damaged("BM25 terms that are not UTF-8") from None
    if ids.size and not (0 <= int(ids.min()) and int(ids.max()) < n_terms):
        raise Damaged("BM25 term ids outside its terms")


def _check_vectors(arrays: dict[str, np.ndarray], width: int) -> None:
    if set(arrays) != {"keys", "vectors"}:
        raise Damaged(f"vector arrays {sorted(arrays)}, not keys and vectors")
    keys, vectors = arrays["keys"], arrays["vectors"]
    if keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != PIECE_KEY_BYTES:
        raise Damaged("vector keys that are not SHA-1 digests")
    if vectors.dtype != np.float32 or vectors.ndim != 2 or len(vectors) != len(keys):
        raise Damaged("vectors that do not match their keys")
    if vectors.shape[1] != width:
        raise Damaged(f"vectors of {vectors.shape[1]} numbers, not the embedder's {width}")
    if not np.isfinite(vectors).all():
        raise Damaged("vectors that are not finite")


def _load_arrays(data: bytes, *, npz: bool) -> dict[str, np.ndarray]:
    """The arrays of ``.npy`` bytes (as ``array``) or of ``.npz`` bytes (by name). An ``.npz`` must hold only
    uncompressed ``.npy`` members, as :func:`numpy.savez` writes them: nothing inflates past the file's size."""
    if not npz:
        return {"array": _npy(data)}
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if info.compress_type != zipfile.ZIP_STORED or name == info.filename or name in arrays \
                    or info.file_size > len(data):
                raise Damaged(f"its member {info.filename!r} is not an uncompressed .npy array of its own")
            arrays[name] = _npy(archive.read(info))
    return arrays


def _npy(raw: bytes) -> np.ndarray:
    """The array of ``.npy`` bytes, read in place. Its header is checked before anything is allocated: no
    Python objects (no pickle), and exactly as many bytes of data as its shape and type need (numpy's own
    reader would allocate a hostile header's shape first)."""
    stream = io.BytesIO(raw)
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise Damaged(f"an .npy file of version {version}")
    if dtype.hasobject or dtype.itemsize == 0:
        raise Damaged(f"an array of {dtype}")
    count, offset = math.prod(shape), stream.tell()
    if count * dtype.itemsize != len(raw) - offset:
        raise Damaged(f"{len(raw) - offset:,} bytes of data for an array of shape {shape} and type {dtype}")
    return np.frombuffer(raw, dtype=dtype, count=count, offset=offset).reshape(shape, order="F" if fortran else "C")


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _joined_terms(vocab: dict[str, int]) -> np.ndarray:
    """Terms by id, one a line, as bytes (a BM25 term is never a line break)."""
    terms = [""] * len(vocab)
    for term, i in vocab.items():
        terms[i] = term
    return np.frombuffer("\n".join(terms).encode("utf-8"), dtype=np.uint8)


def _entry_directory(directory: Path) -> None:
    """Make an entry's directory, or find it made. Whatever else holds its name (a symbolic link planted there,
    which writing through would follow, or a file) is removed first: an entry is a directory of its own."""
    try:
        directory.mkdir(parents=True)
        return
    except FileExistsError:
        pass
    try:
        found = directory.lstat()
    except FileNotFoundError:  # removed meanwhile (evicted): made again
        directory.mkdir(exist_ok=True)
        return
    if not stat.S_ISDIR(found.st_mode):
        log.warning("the document cache entry %s is not a directory ragfunnel wrote; replaced", directory)
        directory.unlink()
        directory.mkdir()


def _is_entry(path: Path) -> bool:
    return len(path.name) == 64 and set(path.name) <= _HEX and path.is_dir() and not path.is_symlink()


def _entries(root: Path) -> list[tuple[float, int, Path]]:
    """(last use, bytes, path) of each entry under ``root``."""
    found = []
    try:
        paths = [p for p in root.iterdir() if _is_entry(p)]
    except OSError:
        return []
    for path in paths:
        try:
            files = list(os.scandir(path))
            size = sum(f.stat().st_size for f in files if f.is_file(follow_symlinks=False))
            used = next((f.stat().st_mtime for f in files if f.name == META), path.stat().st_mtime)
        except OSError:
            continue  # removed meanwhile
        found.append((used, size, path))
    return found


def _remove(directory: Path) -> int:
    """Remove an entry: renamed aside first, so no reader or writer meets it half removed. 1 if it was there."""
    if directory.is_symlink():
        try:
            directory.unlink()  # the link alone, never what it points at
        except OSError:
            return 0
        return 1
    aside = directory.with_name(f".{directory.name}.removing.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        directory.rename(aside)
    except OSError:
        return 0
    shutil.rmtree(aside, ignore_errors=True)
    return 1


def default_root() -> Path | None:
    """``cache_dir()/documents`` while the disk caches are on (:func:`ragfunnel.llm.set_disk_caches`), else None."""
    from ragfunnel.llm.cache_paths import cache_dir
    from ragfunnel.llm.registry import disk_caches_enabled

    return cache_dir() / DIRECTORY if disk_caches_enabled() else None


DOCUMENTS = DocumentCache()


def document_chunks(text: str, *, words: int = CHUNK_WORDS, doc_id: str = "context") -> list[Chunk]:
    """:meth:`DocumentCache.chunks` of the process's cache."""
    return DOCUMENTS.chunks(text, words=words, doc_id=doc_id)


def chunk_tokens(chunks: list[Chunk], llm: LLM) -> list[int]:
    """:meth:`DocumentCache.chunk_tokens` of the process's cache."""
    return DOCUMENTS.chunk_tokens(chunks, llm)


def tokens_past(chunks: list[Chunk], llm: LLM, limit: int, *, slack: int = 0) -> bool:
    """:meth:`DocumentCache.tokens_past` of the process's cache."""
    return DOCUMENTS.tokens_past(chunks, llm, limit, slack=slack)


def text_tokens(text: str, llm: LLM, *, words: int = CHUNK_WORDS, exact_up_to: int | None = None) -> int:
    """:meth:`DocumentCache.text_tokens` of the process's cache."""
    return DOCUMENTS.text_tokens(text, llm, words=words, exact_up_to=exact_up_to)


def chunk_bm25(chunks: list[Chunk]) -> BM25Index:
    """:meth:`DocumentCache.chunk_bm25` of the process's cache."""
    return DOCUMENTS.chunk_bm25(chunks)


def kept_vectors(chunks: list[Chunk], embedder: str, *, width: int) -> KeptVectors | None:
    """:meth:`DocumentCache.kept_vectors` of the process's cache."""
    return DOCUMENTS.kept_vectors(chunks, embedder, width=width)
