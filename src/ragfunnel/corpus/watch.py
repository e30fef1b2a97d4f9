"""A folder that keeps its index current: ``ragfunnel index DIR --out IDX --watch`` and ``serve --watch NAME=DIR``.

:class:`WatchedFolder` reads every supported file of the folder and makes the index hold them
(:func:`~ragfunnel.corpus.index_update.update_index`, whose swap is the only way the index changes: a reader
sees the old index or the new one, never half an update, and a kill leaves the old one). It then listens to
the folder's file events (watchfiles, the ``watch`` extra) and applies what changed in one update once the
events pause (:class:`Debounce`: no event for ``quiet`` seconds, or ``longest`` seconds after the first), so a
thousand files written at once are one update.

What changed is found by walking the folder (``documents.files_under``: hidden files, links leading out of
the folder and FIFOs are skipped, as everywhere) and comparing each file's size, modification time and inode
with what was read: events only say when to look, so a missed event or a renamed subfolder is still seen.
Only new and changed files are read, one at a time, each becoming its documents (one per file, or per
chapter); a file that cannot be read is listed with its one-line reason and never stops the others (it is
read again once it changes). :meth:`WatchedFolder.status` is a snapshot of it all, safe from any thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ragfunnel.corpus.index_manifest import MANIFEST, IndexConfig
from ragfunnel.corpus.index_swap import index_folder, sibling
from ragfunnel.corpus.index_update import IndexUpdate, update_index
from ragfunnel.corpus.readers import SPLITS, documents_of
from ragfunnel.documents import ReadLimits, files_under, read_document
from ragfunnel.documents.formats import SUPPORTED_SUFFIXES
from ragfunnel.errors import ConfigError, InputError, MissingExtra, RagfunnelError, RunBusy
from ragfunnel.llm.fingerprint import file_stamp
from ragfunnel.types import Document

if TYPE_CHECKING:
    from ragfunnel.ray_cluster import RayOptions

log = logging.getLogger(__name__)

QUIET_SECONDS = 0.75  # an update waits until the folder has had no event for this long ...
LONGEST_SECONDS = 5.0  # ... or this long after the first event it applies, whichever comes first
RETRY_SECONDS = 30.0  # an update that failed (the index locked by another writer ...) is tried again after this
_TICK_MS = 200  # how often the watch loop looks whether an update is due, when no event comes

Stage = Literal["scanning", "reading", "indexing"]


def require_watchfiles() -> Any:
    """The watchfiles module; :class:`MissingExtra` naming the ``watch`` extra without it."""
    try:
        import watchfiles
    except ImportError:
        raise MissingExtra("watchfiles", "watch") from None
    return watchfiles


@dataclass(frozen=True)
class WatchedFile:
    """A file the index holds, by its name under the folder, and how many documents it became."""

    name: str
    documents: int


@dataclass(frozen=True)
class SkippedFile:
    """A file not in the index, and why: it could not be read (``failed``), or it is not one to read (a link
    out of the folder, a FIFOs: ``skipped``)."""

    name: str
    reason: str


@dataclass(frozen=True)
class UpdateSummary:
    """What one update did: when it ended (Unix time), its seconds, the files it read and removed, and the
    index's documents added, changed, removed and kept (``rewritten`` False: the index held them already)."""

    finished: float
    seconds: float
    files_read: tuple[str, ...]
    files_removed: tuple[str, ...]
    documents: int
    added: int
    changed: int
    removed: int
    kept: int
    rewritten: bool

    @classmethod
    def of(cls, done: IndexUpdate, *, started: float, read: Iterable[str], removed: Iterable[str]) -> UpdateSummary:
        return cls(finished=time.time(), seconds=round(time.monotonic() - started, 3), files_read=tuple(read),
                   files_removed=tuple(removed), documents=done.manifest.documents, added=done.added,
                   changed=done.changed, removed=done.removed, kept=done.kept, rewritten=done.rewritten)

    def describe(self) -> str:
        files = f"{len(self.files_read):,} file{'s' * (len(self.files_read) != 1)} read"
        if self.files_removed:
            files += f", {len(self.files_removed):,} removed"
        if not self.rewritten:
            return f"{files}; the index already held them ({self.documents:,} documents)"
        return (f"{files}; documents: {self.added:,} added, {self.changed:,} changed, {self.removed:,} removed, "
                f"{self.kept:,} kept ({self.documents:,} in all), in {self.seconds:.1f}s")


@dataclass(frozen=True)
class UpdateProgress:
    """An update under way: its stage (``scanning`` the folder, ``reading`` files, ``indexing`` them) and, while
    reading, the files read of those to read."""

    stage: Stage
    done: int = 0
    total: int = 0


@dataclass(frozen=True)
class WatchStatus:
    """A snapshot of a watched folder: the files its index holds, those pending (changed, not yet applied),
    the last update, the files that failed (with their reasons) or were skipped, the update under way, and the
    last update's error, if it failed. ``version`` grows with every change of the rest."""

    folder: str
    index: str
    files: tuple[WatchedFile, ...] = ()
    pending: tuple[str, ...] = ()
    last_update: UpdateSummary | None = None
    failed: tuple[SkippedFile, ...] = ()
    skipped: tuple[SkippedFile, ...] = ()
    progress: UpdateProgress | None = None
    error: str | None = None
    updates: int = 0  # updates made since the watch started (an update that found the index current counts)
    ready: bool = False  # the index exists (it holds the folder's documents as of last_update)
    version: int = 0

    @property
    def documents(self) -> int:
        return sum(f.documents for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "documents": self.documents}


class Debounce:
    """File events gathered until the folder is quiet: :meth:`due` once no event has come for ``quiet``
    seconds, or ``longest`` seconds after the first one gathered. ``clock`` is injectable for tests."""

    def __init__(self, quiet: float = QUIET_SECONDS, longest: float = LONGEST_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        if not 0 <= quiet <= longest:
            raise ConfigError(f"the quiet time ({quiet:g} s) must be between 0 and the longest wait ({longest:g} s)")
        self.quiet, self.longest, self.clock = quiet, longest, clock
        self._names: set[str] = set()
        self._first = self._last = 0.0
        self._not_before = 0.0
        self.changes = 0  # grows with every change of the names gathered
        self._lock = threading.Lock()

    def add(self, names: Iterable[str]) -> None:
        names = set(names)
        if not names:
            return
        with self._lock:
            now = self.clock()
            if not self._names:
                self._first = now
            self._names |= names
            self._last = now
            self.changes += 1

    def due(self) -> bool:
        with self._lock:
            if not self._names:
                return False
            now = self.clock()
            return now >= self._not_before and (now - self._last >= self.quiet or now - self._first >= self.longest)

    def take(self) -> frozenset[str]:
        """The names gathered, which are forgotten."""
        with self._lock:
            names, self._names = frozenset(self._names), set()
            self.changes += 1
            return names

    def put_back(self, names: Iterable[str], *, after: float) -> None:
        """Gather ``names`` again, not due before ``after`` seconds (an update that failed, tried later)."""
        names = set(names) or {"."}  # "." : the whole folder, when the failed update was a rescan
        with self._lock:
            now = self.clock()
            self._names |= names
            self._first = self._last = now
            self._not_before = now + after
            self.changes += 1

    @property
    def names(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._names)


@dataclass
class _Read:
    """A file as it was read: its size, modification time and inode then, and its documents (or why it failed)."""

    signature: dict[str, object]  # llm.fingerprint.file_stamp: size, mtime, inode, ctime
    documents: tuple[Document, ...] = ()
    failure: str | None = None


@dataclass
class _State:
    files: dict[str, _Read] = field(default_factory=dict)  # by name under the folder, in the walk's order
    skipped: dict[str, str] = field(default_factory=dict)
    last_update: UpdateSummary | None = None
    progress: UpdateProgress | None = None
    error: str | None = None
    updates: int = 0
    version: int = 0


class WatchedFolder:
    """Keeps the index in ``index`` holding the files of ``folder`` (see the module): :meth:`rescan` reads
    every file, :meth:`update` what changed since, and :meth:`watch` (or :meth:`start`, on a thread) applies
    the folder's changes as they come. ``on_update`` is told the status after each update, or failed update.

    ``config`` is the index's settings (those it was built with, when it exists), ``split`` one of
    ``corpus.readers.SPLITS`` (a document per file, or per chapter), ``limits`` what a file may hold.
    """

    def __init__(self, folder: str | Path, index: str | Path, *, config: IndexConfig = IndexConfig(),  # noqa: B008
                 limits: ReadLimits | None = None, split: str = "files", ray: RayOptions | None = None,
                 debounce: Debounce | None = None, on_update: Callable[[WatchStatus], None] | None = None,
                 progress: bool = False):
        folder = Path(folder)
        if not folder.is_dir():
            raise ConfigError(f"{folder} is not a folder; a watch keeps the index of a folder of documents")
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        self.folder = folder.resolve()
        self.index = Path(index)
        self.config, self.limits, self.split, self.ray = config, limits or ReadLimits(), split, ray
        self.debounce = debounce or Debounce()
        self.on_update = on_update
        self.progress = progress
        real_index = index_folder(self.index).absolute()
        self._index_places = tuple(sibling(real_index, suffix) for suffix in ("", ".partial", ".previous", ".lock"))
        self._state = _State()
        self._lock = threading.Lock()  # guards _state
        self._applying = threading.Lock()  # one update at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what it is now

    def status(self) -> WatchStatus:
        with self._lock:
            s = self._state
            held = [(name, r) for name, r in s.files.items() if r.failure is None]
            return WatchStatus(
                folder=str(self.folder), index=str(self.index),
                files=tuple(WatchedFile(name, len(r.documents)) for name, r in held),
                pending=tuple(sorted(self.debounce.names)), last_update=s.last_update,
                failed=tuple(SkippedFile(name, r.failure) for name, r in s.files.items() if r.failure is not None),
                skipped=tuple(SkippedFile(name, why) for name, why in s.skipped.items()), progress=s.progress,
                error=s.error, updates=s.updates, ready=(index_folder(self.index) / MANIFEST).is_file(),
                version=s.version + self.debounce.changes)

    def _set(self, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(self._state, name, value)
            self._state.version += 1

    # -- updating

    def rescan(self) -> WatchStatus:
        """Read every file of the folder again and make the index hold them. An index that cannot be updated
        (built with other settings, locked by another writer) raises; a file that cannot be read is listed."""
        return self._apply(everything=True)

    def update(self) -> WatchStatus:
        """Read the files that changed since they were read, drop those gone, and update the index if any did."""
        return self._apply(everything=False)

    def notice(self, paths: Iterable[str | Path]) -> None:
        """File events at ``paths``: those that concern the folder's documents are pending until the next update."""
        self.debounce.add(self._name(Path(p)) for p in paths if self.concerns(Path(p)))

    def poll(self) -> bool:
        """Update the index if the pending events are due (:class:`Debounce`); whether it did. A failed update
        is recorded in the status, and tried again later."""
        if not self.debounce.due():
            return False
        try:
            self.update()
        except (RagfunnelError, OSError):
            pass  # recorded in the status by _apply
        return True

    def _apply(self, *, everything: bool) -> WatchStatus:
        with self._applying:
            started = time.monotonic()
            events = self.debounce.take()
            try:
                done = self._read_and_index(everything, started)
            except Exception as e:
                if isinstance(e, RunBusy | OSError):  # another writer, a full disk ...: worth another try
                    self.debounce.put_back(events, after=RETRY_SECONDS)
                log.warning("%s: the update failed: %s", self.folder, _one_line(e))
                self._set(progress=None, error=_one_line(e))
                self._told()
                raise
            except BaseException:  # Ctrl-C: the index is the old one, whole
                self._set(progress=None)
                raise
            if done is None:
                self._set(progress=None)
                return self.status()
            with self._lock:
                updates = self._state.updates + 1
            self._set(progress=None, error=None, last_update=done, updates=updates)
            self._told()
            return self.status()

    def _told(self) -> None:
        if self.on_update is not None:
            try:
                self.on_update(self.status())
            except Exception:  # noqa: BLE001 - a listener's failure is its own, never the watch's
                log.exception("%s: a listener of the watch failed", self.folder)

    def _read_and_index(self, everything: bool, started: float) -> UpdateSummary | None:
        """Read what changed (everything: every file) and update the index; the summary, or None when nothing
        changed (or the folder holds nothing to index yet)."""
        self._set(progress=UpdateProgress("scanning"))
        found, skipped = self._walk()
        with self._lock:
            held = dict(self._state.files)
            for name, why in skipped.items():
                if self._state.skipped.get(name) != why:
                    log.warning("skipped %s: %s", name, why)
        signatures = {}
        for name, path in found.items():
            try:
                signatures[name] = file_stamp(path)
            except OSError:  # gone since the walk: its event brings it back if it returns
                continue
        to_read = [name for name, sig in signatures.items()
                   if everything or name not in held or held[name].signature != sig]
        gone = [name for name in held if name not in signatures]
        exists = (index_folder(self.index) / MANIFEST).is_file()
        self._set(skipped=skipped)
        if not to_read and not gone and exists:
            return None
        read = self._read(to_read, found, signatures)
        files = {name: read[name] if name in read else held[name] for name in signatures
                 if name in read or name in held}
        docs = [d for r in files.values() for d in r.documents]
        if not docs and not exists:
            self._set(files=files)
            return None  # nothing to index yet: the index is written with the first readable file
        if not docs:
            raise InputError(f"{self.folder} holds no file that could be read; the index keeps the documents it "
                             "held until one can be")
        self._set(progress=UpdateProgress("indexing"))
        done = update_index(docs, self.index, self.config, source=str(self.folder), ray=self.ray)
        self._set(files=files)  # only now: an update that failed reads its files again next time
        return UpdateSummary.of(done, started=started, read=to_read, removed=gone)

    def _read(self, names: list[str], found: dict[str, Path], signatures: dict[str, dict[str, object]]
              ) -> dict[str, _Read]:
        """Each file of ``names`` read, one at a time: its documents, or the one line saying why it could not be."""
        from tqdm.auto import tqdm

        read: dict[str, _Read] = {}
        with tqdm(total=len(names), desc=f"read {self.folder.name}", unit="file",
                  disable=None if self.progress and names else True) as bar:
            for done, name in enumerate(names):
                if self._stop.is_set():
                    raise InputError(f"{self.folder}: the watch was stopped during an update")
                self._set(progress=UpdateProgress("reading", done, len(names)))
                read[name] = _Read(signatures[name], *self._documents(found[name], name))
                bar.update()
        self._set(progress=UpdateProgress("reading", len(names), len(names)))
        return read

    def _documents(self, path: Path, name: str) -> tuple[tuple[Document, ...], str | None]:
        """The documents of one file, or none and the one-line reason it could not be read."""
        try:
            source = replace(read_document(path, self.limits), name=name)
        except (InputError, MissingExtra) as e:
            log.warning("not indexed: %s", e)
            return (), str(e)
        except OSError as e:
            log.warning("not indexed: %s: %s", name, e)
            return (), f"{name} cannot be read ({e.strerror or e}); check it and its permissions"
        except Exception as e:  # noqa: BLE001 - a reader's bug is one file's failure, never the folder's
            log.exception("%s: unexpected failure reading it", name)
            return (), (f"unexpected {type(e).__name__} reading {name}: {e}; this is a bug in ragfunnel, please "
                        "report it")
        docs = tuple(d for d in documents_of(source, self.split) if d.text.strip())
        return (docs, None) if docs else ((), f"{name} holds no text")

    def _walk(self) -> tuple[dict[str, Path], dict[str, str]]:
        """The supported files under the folder by name (``files_under``'s, in its order), and what it skipped
        (a link leading out of the folder, a FIFO ...) with why."""
        with _skips_noted() as skipped:
            try:
                paths = files_under(self.folder)
            except InputError:
                if not self.folder.is_dir():
                    raise
                paths = []  # none supported (yet)
        found = {self._name(path): path for path in paths}
        return found, {self._name(Path(path)): why for path, why in skipped}

    # -- which events matter

    def concerns(self, path: Path) -> bool:
        """Whether an event at ``path`` may change the index: a supported file, not hidden, or a folder
        holding such files; never the index's own files, when it lives inside the folder."""
        path = Path(path).absolute()
        if not path.is_relative_to(self.folder) or path == self.folder:
            return False
        if any(path.is_relative_to(place) for place in self._index_places):
            return False
        name = self._name(path)
        if any(part.startswith(".") for part in Path(name).parts):
            return False
        if path.suffix.lower() in SUPPORTED_SUFFIXES:
            return True
        with self._lock:
            known_folder = any(held.startswith(name + os.sep) for held in self._state.files)
        return known_folder or path.is_dir()

    def _name(self, path: Path) -> str:
        path = Path(path).absolute()
        return str(path.relative_to(self.folder)) if path.is_relative_to(self.folder) else str(path)

    # -- watching

    def watch(self, *, rescan: bool = False) -> None:
        """Apply the folder's changes as they come, until :meth:`stop` (or Ctrl-C). Events are listened to
        first; then the folder is read (every file with ``rescan``, else those changed since the last read),
        so nothing that changes meanwhile is missed. Failed updates are in the status, and tried again."""
        watchfiles = require_watchfiles()
        first = True
        for changes in watchfiles.watch(self.folder, watch_filter=lambda change, path: self.concerns(Path(path)),
                                        debounce=int(self.debounce.quiet * 1000) or 50, step=50, stop_event=self._stop,
                                        rust_timeout=_TICK_MS, yield_on_timeout=True):
            self.notice(path for _, path in changes)
            if first:  # the watcher is listening now
                first = False
                try:
                    self.rescan() if rescan else self.update()
                except (RagfunnelError, OSError):
                    pass  # recorded in the status
                continue
            self.poll()

    def start(self) -> None:
        """Watch on a thread of its own, starting with a rescan (:meth:`stop` ends it)."""
        require_watchfiles()
        self._stop.clear()
        self._thread = threading.Thread(target=self._watching, name=f"ragfunnel-watch-{self.folder.name}",
                                        daemon=True)
        self._thread.start()

    def _watching(self) -> None:
        try:
            self.watch(rescan=True)
        except Exception as e:  # noqa: BLE001 - the service goes on; the status says why the watch ended
            log.exception("%s: the watch ended", self.folder)
            self._set(error=f"the watch ended: {_one_line(e)}", progress=None)

    def stop(self, *, wait: float = 2.0) -> bool:
        """Stop watching (an update under way stops before its next file, or finishes indexing); whether the
        thread has ended within ``wait`` seconds. A kill is safe too: the index is swapped in whole, or not."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=wait)
            return not self._thread.is_alive()
        return True


def _one_line(error: BaseException) -> str:
    if isinstance(error, RagfunnelError):
        return str(error)
    if isinstance(error, OSError):
        return f"{error.filename or ''}{': ' if error.filename else ''}{error.strerror or error}"
    return f"unexpected {type(error).__name__}: {error}"


# The folder walk (documents.read.files_under) says what it skips (a link out of the folder, a FIFO ...) as a
# warning; a watch walks the folder at each update, so it takes them as a list of its own instead of a warning
# each time. Only the walks of a watch, on their own thread, are taken: every other walk warns as before.
_walking = threading.local()


class _NoteSkips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        noted = getattr(_walking, "skipped", None)
        if noted is None or not (isinstance(record.msg, str) and record.msg.startswith("skipped %s: ")
                                 and record.args):
            return True
        path = record.args[0]  # type: ignore[index]
        noted.append((path, record.getMessage().removeprefix(f"skipped {path}: ")))
        return False


logging.getLogger("ragfunnel.documents.read").addFilter(_NoteSkips())


@contextmanager
def _skips_noted() -> Iterator[list[tuple[str, str]]]:
    _walking.skipped = noted = []
    try:
        yield noted
    finally:
        _walking.skipped = None
