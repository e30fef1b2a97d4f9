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
  counted yet); ``<id>`` hashes the model's ``tokenizer_identity`` (its weights' SHA-256, which carry the
  tokenizer), so each tokenizer used has its own file;
- ``bm25-<id>.npz``: the chunks' BM25 term ids (ids, lengths, terms), for the BM25 tokeniser's identity
  (:func:`ragfunnel.retrieve.bm25.tokeniser_identity`);
- ``vectors-<id>.npz``: an embedder's vectors of the pieces embedded so far, by each piece's SHA-1, for the
  embedder's identity: added to, never recomputed.

Each file is written whole or not at all (:mod:`ragfunnel.atomic`) and holds what its name and the entry's key
decide, so two processes writing one entry write the same bytes (for vectors, the last writer's set) and a reader
never sees a torn file, or parts that disagree. Files are read within bounds (:mod:`ragfunnel.bounded`), arrays
without pickle.

The entries stay within ``max_bytes`` together: past it, the least recently used (by when their ``meta.json``
was last read or written) are removed. An entry that does not parse or check out is removed with one warning and
rebuilt; one from another format or version is never found, its key differs. A cache directory that cannot be
written (read-only, full) costs one warning per process, and answers come as they would without it. With the disk
caches off (``--no-cache``, :func:`ragfunnel.llm.set_disk_caches`) nothing is read or written; the last few
documents' parts are kept in memory either way.

:func:`document_chunks` returns a fresh list of an entry's :class:`~ragfunnel.types.Chunk` objects; the functions
given chunks (:func:`chunk_tokens`, :func:`chunk_bm25`, :func:`kept_vectors`) find the entry by those objects'
identity, so a list that is not a document's chunks in order (a selection, another chunking) is worked on as
without the cache. Results are the same with and without it: the same chunks, counts, BM25 scores and vectors.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
import secrets
import shutil
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragfunnel.atomic import write_atomic
from ragfunnel.bounded import RefusedPath, UnreadableFile, read_json_file, read_regular_file
from ragfunnel.llm.base import LLM
from ragfunnel.retrieve.bm25 import BM25Index, TokenIds, index_token_ids, tokeniser_identity, tokenize_ids
from ragfunnel.text.chunking import CHUNK_WORDS, chunk_words
from ragfunnel.types import Chunk
from ragfunnel.version import __version__

log = logging.getLogger(__name__)

FORMAT = "ragfunnel-document-1"  # raise it when the chunker, or what a file holds, changes
DIRECTORY = "documents"
DEFAULT_MAX_BYTES = 1 << 30  # a 1.2 MB book's entry is a few MB: hundreds of books
MEMORY_DOCUMENTS = 4  # documents whose parts each process keeps in memory
META = "meta.json"
PIECE_KEY_BYTES = 20  # SHA-1 of a piece's text, as the in-process vectors are kept by
# A whole-text count differs from the sum of its chunks' counts only where the chunks meet (the whitespace
# between them, a first word read with the space before it): within this many tokens per boundary.
BOUNDARY_TOKENS = 2
_HEX = frozenset("0123456789abcdef")


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
    tokens: dict[str, np.ndarray] = field(default_factory=dict)  # part id -> counts, the whole text's last
    bm25: dict[str, BM25Index] = field(default_factory=dict)
    vectors: dict[str, dict[bytes, np.ndarray]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


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

    @property
    def root(self) -> Path | None:
        """Where entries are kept now (None: in memory only)."""
        return self._root if self._root is not None else default_root()

    # -- what methods ask for -----------------------------------------------------------------------

    def chunks(self, text: str, *, words: int = CHUNK_WORDS, doc_id: str = "context") -> list[Chunk]:
        """``text`` (a checked context) cut into ``words``-word chunks, as :func:`~ragfunnel.text.chunk_words` cuts
        it, from the cache when it holds them."""
        return list(self._entry(text, words=words, doc_id=doc_id).chunks)

    def chunk_tokens(self, chunks: list[Chunk], llm: LLM) -> list[int]:
        """Each chunk's tokens under ``llm``'s tokenizer; the chunks not counted before are counted together."""
        entry = self._entry_of(chunks)
        identity = llm.tokenizer_identity
        if entry is None or identity is None:
            return llm.count_tokens_many([c.text for c in chunks])
        name = f"tokens-{part_id(identity)}.npy"
        with entry.lock:
            counts = self._tokens(entry, name)
            missing = np.flatnonzero(counts[:-1] < 0)
            if missing.size:
                counts = counts.copy()
                counts[missing] = llm.count_tokens_many([entry.chunks[i].text for i in missing.tolist()])
                entry.tokens[name] = counts
                self._write_array(entry.key, name, counts)
            return counts[:-1].tolist()

    def text_tokens(self, text: str, llm: LLM, *, words: int = CHUNK_WORDS, exact_up_to: int | None = None) -> int:
        """The whole text's tokens under ``llm``'s tokenizer.

        Exact when kept, or when ``exact_up_to`` is None or the text may hold that many tokens or fewer. Past
        it (a book, where the caller only needs to know it is long), it is the sum of the chunks' counts (which
        are needed anyway, and kept) plus one token for each place the chunks meet across more than one space:
        within :data:`BOUNDARY_TOKENS` of the exact count at each place the chunks meet, and only returned when
        even that error leaves it past ``exact_up_to``.
        """
        entry = self._entry(text, words=words)
        identity = llm.tokenizer_identity
        name = None if identity is None else f"tokens-{part_id(identity)}.npy"
        if name is not None:
            with entry.lock:
                kept = int(self._tokens(entry, name)[-1])
            if kept >= 0:
                return kept
        if exact_up_to is not None:
            estimate = sum(self.chunk_tokens(list(entry.chunks), llm)) + entry.boundaries
            if estimate - BOUNDARY_TOKENS * (len(entry.chunks) + 1) > exact_up_to:
                return estimate
        exact = llm.count_tokens(text)
        if name is not None:
            with entry.lock:
                counts = self._tokens(entry, name).copy()
                counts[-1] = exact
                entry.tokens[name] = counts
                self._write_array(entry.key, name, counts)
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

    def kept_vectors(self, chunks: list[Chunk], embedder: str) -> KeptVectors | None:
        """The vectors ``embedder`` (its identity) made of the pieces of ``chunks``' document so far, to read
        and add to; None when ``chunks`` are not a document's chunks."""
        entry = self._entry_of(chunks)
        return None if entry is None else KeptVectors(self, entry, f"vectors-{part_id(embedder)}.npz")

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
                entry = _Entry(key, tuple(chunks), _boundaries(text, chunks))
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
        root = self.root
        if root is None:
            return None
        try:
            meta = read_json_file(root / key / META, max_bytes=self.max_bytes, what="document cache entry")
            chunks = _chunks_from(meta, key, text, words=words, doc_id=doc_id)
        except FileNotFoundError:
            return None
        except OtherVersion:
            return None
        except (UnreadableFile, Damaged) as e:
            if isinstance(e, RefusedPath) and e.problem.startswith("unreadable"):
                self._cannot_read(root, e.problem)
                return None
            self._damaged(root / key, getattr(e, "problem", None) or str(e))
            return None
        self._touch(key)
        return _Entry(key, tuple(chunks), _boundaries(text, chunks))

    def _tokens(self, entry: _Entry, name: str) -> np.ndarray:
        """The entry's counts in ``name`` (memory, then disk; -1 where not counted). Called holding entry.lock."""
        counts = entry.tokens.get(name)
        if counts is None:
            counts = self._read_array(entry, name, _check_tokens)
            if counts is None:
                counts = np.full(len(entry.chunks) + 1, -1, dtype=np.int64)
            entry.tokens[name] = counts
        return counts

    def _read_term_ids(self, entry: _Entry, name: str) -> TokenIds | None:
        arrays = self._read_arrays(entry, name, _check_term_ids)
        if arrays is None:
            return None
        terms = arrays["terms"].tobytes().decode("utf-8").split("\n") if arrays["terms"].size else []
        return TokenIds(arrays["ids"], arrays["lengths"], {t: i for i, t in enumerate(terms)})

    # -- files --------------------------------------------------------------------------------------

    def _read_array(self, entry: _Entry, name: str, check) -> np.ndarray | None:
        arrays = self._read_arrays(entry, name, check)
        return None if arrays is None else arrays["array"]

    def _read_arrays(self, entry: _Entry, name: str, check) -> dict[str, np.ndarray] | None:
        """The arrays of an entry's ``.npy`` (as ``array``) or ``.npz`` file, checked by ``check(arrays, n_chunks)``;
        None when missing, unreadable or damaged (which removes the entry, with one warning)."""
        root = self.root
        if root is None:
            return None
        path = root / entry.key / name
        try:
            data = read_regular_file(path, max_bytes=self.max_bytes, what="document cache file")
            loaded = np.load(io.BytesIO(data), allow_pickle=False)
            if isinstance(loaded, np.ndarray):
                arrays = {"array": loaded}
            else:
                with loaded:
                    arrays = {k: loaded[k] for k in loaded.files}
            check(arrays, len(entry.chunks))
        except FileNotFoundError:
            return None
        except RefusedPath as e:
            if e.problem.startswith("unreadable"):
                self._cannot_read(root, e.problem)
            else:
                self._damaged_file(path, e.problem)
            return None
        except (ValueError, OSError, EOFError, KeyError, Damaged) as e:  # numpy's and zipfile's ways of saying so
            self._damaged_file(path, str(e))
            return None
        return arrays

    def _write_array(self, key: str, name: str, array: np.ndarray) -> None:
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        self._write(key, name, buffer.getvalue())

    def _write(self, key: str, name: str, data: bytes) -> None:
        """Replace one file of an entry whole; a root that cannot be written is reported once and left alone."""
        root = self.root
        if root is None or root == self._unwritable or len(data) > self.max_bytes:
            return
        directory = root / key
        for attempt in range(2):
            try:
                directory.mkdir(parents=True, exist_ok=True)
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
                            "run (set RAGFUNNEL_CACHE to a writable directory, or pass --no-cache)", root, reason)
                return
        self._evict(root, keep=key)

    def _touch(self, key: str) -> None:
        """Mark an entry used now, for the least-recently-used order."""
        root = self.root
        if root is None or root == self._unwritable:
            return
        try:
            os.utime(root / key / META)
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

    def __init__(self, cache: DocumentCache, entry: _Entry, name: str):
        self._cache, self._entry, self._name = cache, entry, name

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
            kept = {**self._kept(), **(self._read() or {}), **vectors}
            self._entry.vectors[self._name] = kept
            keys = np.frombuffer(b"".join(kept), dtype=np.uint8).reshape(len(kept), PIECE_KEY_BYTES)
            self._cache._write(self._entry.key, self._name,
                               _npz(keys=keys, vectors=np.stack(list(kept.values())).astype(np.float32)))

    def _kept(self) -> dict[bytes, np.ndarray]:
        kept = self._entry.vectors.get(self._name)
        if kept is None:
            kept = self._entry.vectors[self._name] = self._read() or {}
        return kept

    def _read(self) -> dict[bytes, np.ndarray] | None:
        arrays = self._cache._read_arrays(self._entry, self._name, _check_vectors)
        if arrays is None:
            return None
        return {bytes(k): v for k, v in zip(arrays["keys"], arrays["vectors"], strict=True)}


def piece_key(text: str) -> bytes:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()


class OtherVersion(Exception):
    """An entry written by another format or version of ragfunnel: not read, written over."""


def _meta(key: str, text: str, words: int, doc_id: str, chunks: list[Chunk]) -> dict:
    spans = [v for c in chunks for v in (c.start, c.start + len(c.text), c.n_words)]
    return {"format": FORMAT, "version": __version__, "key": key, "text_sha256": text_digest(text),
            "chars": len(text), "chunk_words": words, "doc_id": doc_id, "spans": spans}


def _chunks_from(meta: object, key: str, text: str, *, words: int, doc_id: str) -> list[Chunk]:
    """The chunks a ``meta.json`` describes, each checked against ``text``; Damaged or OtherVersion otherwise."""
    if not isinstance(meta, dict):
        raise Damaged("not a JSON object")
    if meta.get("format") != FORMAT or meta.get("version") != __version__:
        raise OtherVersion()
    if meta.get("key") != key or meta.get("text_sha256") != text_digest(text) or meta.get("chars") != len(text):
        raise Damaged("it describes another text")
    if meta.get("chunk_words") != words or meta.get("doc_id") != doc_id:
        raise Damaged("it describes another chunking")
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
    counts = arrays["array"]
    if counts.dtype != np.int64 or counts.shape != (n_chunks + 1,) or (counts < -1).any():
        raise Damaged(f"token counts of shape {counts.shape} and type {counts.dtype}, not {n_chunks + 1} int64s")


def _check_term_ids(arrays: dict[str, np.ndarray], n_chunks: int) -> None:
    if set(arrays) != {"ids", "lengths", "terms"}:
        raise Damaged(f"BM25 arrays {sorted(arrays)}, not ids, lengths and terms")
    ids, lengths, terms = arrays["ids"], arrays["lengths"], arrays["terms"]
    if ids.dtype != np.int32 or lengths.dtype != np.int64 or terms.dtype != np.uint8:
        raise Damaged("BM25 arrays of the wrong types")
    if lengths.shape != (n_chunks,) or ids.ndim != 1 or ids.size != int(lengths.sum()) or (lengths < 0).any():
        raise Damaged("BM25 term ids that do not match the chunks")
    try:
        n_terms = len(terms.tobytes().decode("utf-8").split("\n")) if terms.size else 0
    except UnicodeDecodeError:
        raise Damaged("BM25 terms that are not UTF-8") from None
    if ids.size and not (0 <= int(ids.min()) and int(ids.max()) < n_terms):
        raise Damaged("BM25 term ids outside its terms")


def _check_vectors(arrays: dict[str, np.ndarray], n_chunks: int) -> None:
    if set(arrays) != {"keys", "vectors"}:
        raise Damaged(f"vector arrays {sorted(arrays)}, not keys and vectors")
    keys, vectors = arrays["keys"], arrays["vectors"]
    if keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != PIECE_KEY_BYTES:
        raise Damaged("vector keys that are not SHA-1 digests")
    if vectors.dtype != np.float32 or vectors.ndim != 2 or len(vectors) != len(keys) or not np.isfinite(vectors).all():
        raise Damaged("vectors that do not match their keys")


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


def text_tokens(text: str, llm: LLM, *, words: int = CHUNK_WORDS, exact_up_to: int | None = None) -> int:
    """:meth:`DocumentCache.text_tokens` of the process's cache."""
    return DOCUMENTS.text_tokens(text, llm, words=words, exact_up_to=exact_up_to)


def chunk_bm25(chunks: list[Chunk]) -> BM25Index:
    """:meth:`DocumentCache.chunk_bm25` of the process's cache."""
    return DOCUMENTS.chunk_bm25(chunks)


def kept_vectors(chunks: list[Chunk], embedder: str) -> KeptVectors | None:
    """:meth:`DocumentCache.kept_vectors` of the process's cache."""
    return DOCUMENTS.kept_vectors(chunks, embedder)
