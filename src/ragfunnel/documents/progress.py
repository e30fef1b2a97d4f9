"""Progress of long reading (OCR of a scan, a page at a time): readers report it, and whoever asked for the
reading listens — the CLI draws a bar, ``serve`` puts it in the job's status and on its event stream.

The sink is the one in effect in the reading thread (:func:`reading_files`); with none, reports go nowhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

ProgressSink = Callable[[str, int, int], None]  # (what is being read, units done, units in all)
_sink: ContextVar[ProgressSink | None] = ContextVar("reading_files", default=None)


@contextmanager
def reading_files(sink: ProgressSink | None) -> Iterator[None]:
    """Within the block, in this thread, readers report their progress to ``sink``."""
    previous = _sink.set(sink)
    try:
        yield
    finally:
        _sink.reset(previous)


@contextmanager
def progress_named(old: str, new: str) -> Iterator[None]:
    """Within the block, reports name the file ``new`` where its reader calls it ``old`` (an upload is read
    under a name made for it; its client knows it by its own)."""
    outer = _sink.get()
    with reading_files(None if outer is None else lambda what, done, total: outer(what.replace(old, new), done,
                                                                                    total)):
        yield


def report_progress(what: str, done: int, total: int) -> None:
    """Tell the sink in effect that ``done`` of ``total`` units of ``what`` are read."""
    sink = _sink.get()
    if sink is not None:
        sink(what, done, total)
