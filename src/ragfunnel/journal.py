"""Crash-safe, single-writer JSONL journals: the one store behind every long run.

``eval``, ``scale grid``, ``scale demos`` and ``funnel distill`` append one JSON row per finished
unit of work and resume by skipping what is already there. The promises, kept here once:

* **Nothing finished is lost.** A row is written and fsync'd as soon as it is done, so a kill can
  tear only the line in flight; the next *writer* cuts that partial line off before appending.
* **Nothing is written twice.** A writer holds an exclusive ``fcntl.flock`` on a lock file for as
  long as it runs; a second writer fails at once with one line naming the holder's PID.
* **Readers never write.** :func:`read_jsonl` ignores a torn last line without touching the file,
  so ``report`` or ``scale fit`` over a live run cannot cut the row being written.
* **Failures are kept apart.** A run directory keeps finished rows in ``rows.jsonl`` and failed
  ones in ``failed.jsonl``; a resume retries the failed pairs (unless told not to) and a pair that
  then succeeds is simply finished — ``rows.jsonl`` never holds two rows for one pair.
* **Stopping is clean.** Ctrl-C or SIGTERM leaves every finished row in place and ends with
  :class:`~ragfunnel.errors.Interrupted` ("N rows saved; re-run to resume"); a backend that goes
  away ends the run with its error and the same count, writing no failure row for it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, Protocol, TypeVar

from ragfunnel.atomic import write_atomic
from ragfunnel.bounded import loads, read_regular_file
from ragfunnel.errors import BackendUnavailable, ConfigError, InputError, Interrupted, RunBusy, option

log = logging.getLogger(__name__)

CONFIG_FILE, ROWS_FILE, FAILED_FILE, LOCK_FILE = "config.json", "rows.jsonl", "failed.jsonl", ".lock"
# Far above any run's rows (a row is a few kilobytes) and configuration (a few options), so only a file that
# is no journal, or a device, is refused by size.
MAX_JOURNAL_BYTES = 4 << 30
MAX_CONFIG_BYTES = 16 << 20
_CONFIG_FIX = f"it records what the run is: restore it, or start fresh in a new directory ({option('out')})"
_OUT = option("out")


def out_dir(path: Path, option: str = _OUT) -> Path:
    """A directory to write into, made with its parents; a file in the way is an error naming the option."""
    _no_file_at(path, option)
    _make_dirs(path, option)
    return path


def check_free(path: Path, option: str = _OUT) -> None:
    """Fail now if ``path`` cannot be this run's directory — a file is in the way, or another process is
    writing the run — so a command learns it before its slow setup. Creates nothing."""
    _no_file_at(path, option)
    if (path / LOCK_FILE).exists():
        with exclusive(path / LOCK_FILE, path):
            pass


def _no_file_at(path: Path, option: str) -> None:
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path} is a file, but a directory is needed here; pass a directory path")


def out_file(path: Path, option: str = _OUT) -> Path:
    """A file to write, its parent folders made; a directory in the way is an error naming the option."""
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a directory, but a file is needed here; pass a file path "
                          f"such as {path / 'out.jsonl'}")
    _make_dirs(path.parent, option)
    return path


def _make_dirs(path: Path, option: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"{option} {path}: a part of this path is a file; pass a path under a directory") from None
    except PermissionError:
        raise ConfigError(f"{option} {path}: no permission to create it; pass a writable location") from None


@contextmanager
def exclusive(lock_path: Path, what: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (``what`` is the run it guards, for the message).

    The holder's PID is written into the lock file so a refused writer can name it. The lock is the
    kernel's (``flock``), so it dies with its process: a kill never leaves a stale lock behind.
    """
    try:  # never through a planted link, which would have the PID written into whatever it points to
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise ConfigError(f"{lock_path} is a link, where ragfunnel keeps the lock of {what}; remove it") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise RunBusy(f"{what} is being written by another ragfunnel process (PID {holder}); wait for it to "
                          f"finish or stop it, or write to another directory ({option('out')})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def read_jsonl(path: Path, *, what: str = "row") -> list[tuple[int, dict[str, Any]]]:
    """The complete rows of a JSONL file with their line numbers, read without modifying it.

    A last line without its newline is used when it parses, else ignored: it is a write still in
    flight or cut short by a kill. Any other line that is not a JSON object — a bad byte, text that
    is not JSON, a list — is an :class:`InputError` naming the file and line.
    """
    try:
        data = read_regular_file(path, max_bytes=MAX_JOURNAL_BYTES, what=f"the {what}s file",
                                 fix=f"it is not a JSONL file of {what}s: restore or remove it")
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends in a newline
    rows = [(number, _parse_line(path, number, line, what)) for number, line in enumerate(lines, start=1)
            if line.strip()]
    if tail.strip() and (row := _complete_row(tail)) is not None:
        rows.append((len(lines) + 1, row))
    return rows


def _parse_line(path: Path, number: int, line: bytes, what: str) -> dict[str, Any]:
    try:
        row = loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{path}:{number} is not UTF-8 text; the file is damaged or not a JSONL file of "
                         f"{what}s (save it as UTF-8)") from None
    except ValueError as e:  # not JSON, nested past reason, a number too long to read
        problem = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        raise InputError(f"{path}:{number} is not a JSON {what} ({problem}); the file is damaged or not a "
                         f"JSONL file of {what}s") from None
    if not isinstance(row, dict):
        raise InputError(f"{path}:{number} is a JSON {type(row).__name__}, not a {what} object")
    return row


def _complete_row(line: bytes) -> dict[str, Any] | None:
    """The object on a last line that lacks its newline, or None when it is a torn write."""
    try:
        row = loads(line.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError alike: cut mid-write
        return None
    return row if isinstance(row, dict) else None


def read_config(path: Path) -> dict[str, Any] | None:
    """A run's recorded configuration (None when there is none yet); a damaged one is an InputError."""
    try:
        raw = read_regular_file(path, max_bytes=MAX_CONFIG_BYTES, what="run configuration", fix=_CONFIG_FIX)
    except FileNotFoundError:
        return None
    try:
        value = loads(raw.decode("utf-8"))
    except ValueError as e:  # not UTF-8, not JSON, nested past reason
        raise InputError(f"{path} is damaged ({type(e).__name__}); {_CONFIG_FIX}") from None
    if not isinstance(value, dict):
        raise InputError(f"{path} is a JSON {type(value).__name__}, not a run configuration; {_CONFIG_FIX}")
    return value


# Recorded in a run's configuration but not part of what the run is: a resume by a newer ragfunnel is
# allowed, with a warning naming both versions.
VERSION_KEY = "ragfunnel_version"


def claim_config(path: Path, config: dict[str, Any], *, what: Path, implied: dict[str, Any] | None = None) -> None:
    """Record ``config`` for a new run, or refuse ``what`` when it holds a run with a different one.

    ``implied``: keys added to the configuration after runs were made without them, each with the value
    such a run had (an older eval run was scored with the ``ragfunnel`` profile), so those runs resume.
    """
    old = read_config(path)
    if old is None:
        write_atomic(path, json.dumps(config, indent=2, sort_keys=True))  # a kill mid-write leaves no half config
        return
    # Compared through JSON, so tuples and lists (and int and float keys) compare as they are stored.
    new = json.loads(json.dumps(config))
    old = json.loads(json.dumps(implied or {})) | old
    started_by, resumed_by = old.pop(VERSION_KEY, None), new.pop(VERSION_KEY, None)
    if old != new:
        differ = "; ".join(f"{key}: {_shown(was)} there, {_shown(now)} now" for key, was, now in _differences(old, new))
        raise ConfigError(f"{what} holds a run with a different configuration (differs in: {differ}); "
                          f"start fresh in a new directory ({option('out')}), or repeat the original options to "
                          "resume")
    if started_by != resumed_by:
        log.warning("%s was started by ragfunnel %s; resuming it with %s", what, started_by or "(unrecorded)",
                    resumed_by)


_ABSENT = object()


def _differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, old value, new value) of every leaf that differs between two configurations."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [(prefix, old, new)]
    found = []
    for key in sorted(set(old) | set(new)):
        found += _differences(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{prefix}.{key}" if prefix else key)
    return found


def _shown(value: Any) -> str:
    text = "unset" if value is _ABSENT else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


class Appender:
    """Durable appends to one JSONL file, by the run's single writer (which holds its lock)."""

    def __init__(self, path: Path):
        cut_torn_line(path)
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def append(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def cut_torn_line(path: Path) -> None:
    """Make a file end on a line boundary before appending: a last line cut short by a kill is dropped,
    a complete one that only lacks its newline (a file written by hand) gets it.

    Only a writer holding the run's lock may call this: on a live run it would cut the row in flight.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    data = read_regular_file(path, max_bytes=MAX_JOURNAL_BYTES, what="the journal",
                             fix="it is not a JSONL journal: restore or remove it")
    keep = data.rfind(b"\n") + 1
    if keep == len(data):
        return
    if _complete_row(data[keep:]) is not None:
        with path.open("ab") as f:
            f.write(b"\n")
        return
    log.warning("%s ends in a partial line (a run was killed mid-write); dropping it", path)
    with path.open("r+b") as f:
        f.truncate(keep)


class Row(Protocol):
    """What a run directory stores: a typed row that knows its pair and whether it failed."""

    error: str | None

    @property
    def key(self) -> Hashable: ...

    def to_json(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=Row)


@dataclass
class RunState(Generic[R]):
    """A run directory as read: its configuration, finished rows and the pairs that failed last time."""

    path: Path
    config: dict[str, Any]
    finished: dict[Hashable, R] = field(default_factory=dict)
    failed: dict[Hashable, R] = field(default_factory=dict)  # latest failure of each pair not finished

    @property
    def rows(self) -> list[R]:
        """Every pair once: its finished row, else its latest failure."""
        return [*self.finished.values(), *self.failed.values()]


def load_run(path: Path, parse: Callable[[dict[str, Any]], R], *, command: str) -> RunState[R]:
    """Read a run directory without modifying it (safe beside a live writer)."""
    config = read_config(path / CONFIG_FILE) if path.is_dir() else None
    if config is None:
        raise InputError(f"{path} is not a run directory (no {CONFIG_FILE}); pass a directory `{command}` wrote")
    state: RunState[R] = RunState(path, config)
    # Older runs kept failures in rows.jsonl; they count as failures either way.
    for name in (ROWS_FILE, FAILED_FILE):
        for number, raw in read_jsonl(path / name):
            try:
                row = parse(raw)
            except InputError as e:
                raise InputError(f"{path / name}:{number}: {e}") from None
            if row.error is None:
                state.finished[row.key] = row
                state.failed.pop(row.key, None)
            elif row.key not in state.finished:
                state.failed[row.key] = row
    return state


@contextmanager
def saving(path: Path, saved: Callable[[], int]) -> Iterator[None]:
    """Make a run stopped inside the block say how many rows it kept (``saved()``) in ``path``: Ctrl-C
    becomes :class:`Interrupted`; a backend lost (or an extra missing) its error with the count."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: {saved()} rows saved in {path}; re-run to resume") from None
    except BackendUnavailable as e:
        raise BackendUnavailable(f"{e.marked()} ({saved()} rows saved in {path}; re-run to resume once it is "
                                 "back)") from e


class RunDir(Generic[R]):
    """A run directory opened for writing by its one writer: ``with RunDir(...) as run: run.record(row)``.

    Holds ``config.json`` (what the run is; a different one is refused), ``rows.jsonl`` (finished
    rows) and ``failed.jsonl`` (failed ones). Leaving the block by Ctrl-C raises
    :class:`Interrupted`, by a lost backend its :class:`BackendUnavailable` — each saying how many
    rows are saved.
    """

    def __init__(self, path: str | Path, config: dict[str, Any], parse: Callable[[dict[str, Any]], R], *,
                 command: str, implied: dict[str, Any] | None = None):
        self.path = Path(path)
        self._config, self._parse, self._command = config, parse, command
        self._implied = implied
        self._stack = ExitStack()

    def __enter__(self) -> RunDir[R]:
        out_dir(self.path)
        with ExitStack() as stack:  # on any failure below, whatever was opened is closed again
            stack.enter_context(exclusive(self.path / LOCK_FILE, self.path))
            claim_config(self.path / CONFIG_FILE, self._config, what=self.path, implied=self._implied)
            self.state = load_run(self.path, self._parse, command=self._command)
            self._rows = stack.enter_context(closing(Appender(self.path / ROWS_FILE)))
            self._failures = stack.enter_context(closing(Appender(self.path / FAILED_FILE)))
            stack.enter_context(saving(self.path, lambda: len(self.state.finished)))
            self._stack = stack.pop_all()
        return self

    def todo(self, pairs: Sequence[tuple[Hashable, Any]], *, retry_failed: bool = True) -> list[Any]:
        """The work items of ``(key, item)`` pairs not finished (nor failed, unless retried)."""
        skip = set(self.state.finished) | (set() if retry_failed else set(self.state.failed))
        todo = [item for key, item in pairs if key not in skip]
        if self.state.finished or self.state.failed:
            retried = sum(1 for key, _ in pairs if key in self.state.failed) if retry_failed else 0
            log.info("resuming %s: %d rows done, %d failed before%s, %d to go", self.path,
                     len(self.state.finished), len(self.state.failed), f" ({retried} retried)" if retried else "",
                     len(todo))
        return todo

    def record(self, row: R) -> None:
        """Store one row durably: finished rows and failures each in their own file."""
        if row.error is None:
            self.state.finished[row.key] = row  # counted first: a Ctrl-C after the write still counts it
            self.state.failed.pop(row.key, None)
            self._rows.append(row.to_json())
        else:
            self.state.failed[row.key] = row
            self._failures.append(row.to_json())

    def __exit__(self, *error: Any) -> bool | None:
        return self._stack.__exit__(*error)


_left_running = threading.Event()


def left_work_running() -> bool:
    """Whether :func:`drain` stopped early with work still running in its threads (not waited for)."""
    return _left_running.is_set()


def drain(todo: Sequence[Any], work: Callable[[Any], R], record: Callable[[R], None], *,
          workers: int = 1, on_row: Callable[[R], None] = lambda row: None) -> None:
    """Run ``work`` on every item, recording each row as soon as it is done.

    One worker runs in the calling thread, so Ctrl-C stops it at once. Several run in a pool; on
    Ctrl-C or an error, every row already finished is recorded, work not yet started is cancelled
    and items still running are abandoned: their rows are not recorded and the pool is not waited
    for (:func:`left_work_running` tells a command to exit without joining those threads).
    """
    if workers == 1:
        for item in todo:
            row = work(item)
            record(row)
            on_row(row)
        return
    pool = ThreadPoolExecutor(max_workers=workers)
    pending: set[Future] = {pool.submit(work, item) for item in todo}
    try:
        while pending:
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            failure = None
            for future in finished:  # rows go out as they finish: a slow pair holds back no finished one
                if future.exception() is not None:
                    failure = failure or future.exception()
                    continue
                row = future.result()
                record(row)
                on_row(row)
            if failure is not None:
                raise failure
    finally:
        if pending:
            _left_running.set()
        pool.shutdown(wait=not pending, cancel_futures=True)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file, read without modifying it (:func:`read_jsonl` without line numbers)."""
    return [row for _, row in read_jsonl(path)]
