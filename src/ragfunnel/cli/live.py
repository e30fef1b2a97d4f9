"""One line of progress on a terminal while ``ask`` works, gone before the answer is printed.

The line says which stage runs and for how long, how much of a long prompt a local model has read, and the
tail of what the answering model is writing. It is
redrawn in place (carriage return, erase to the end of the line), so the answer itself appears once, on
stdout, when it is clean. A log record (a warning, a progress note) first erases the line, so it is printed
on a line of its own.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

ERASE = "\r\x1b[K"
REFRESH_SECONDS = 0.5
TAIL_CHARS = 200  # of the model's text kept for the line


class LiveLine:
    """A status line on ``stream``: the running stage, its seconds, and the tail of the model's text."""

    def __init__(self, stream: TextIO, *, width: int | None = None):
        self.stream = stream
        self.width = width
        self._lock = threading.RLock()
        self._shown = False
        self._stage = ""
        self._since = time.monotonic()
        self._text = ""
        self._read: tuple[int, int] | None = None  # prompt tokens held, of how many

    def started(self, stage: str) -> None:
        with self._lock:
            self._stage, self._since, self._text, self._read = stage, time.monotonic(), "", None
            self.draw()

    def done(self, stage: object) -> None:
        with self._lock:
            self._stage, self._text = "", ""
            self.erase()

    def wrote(self, text: str) -> None:
        with self._lock:
            self._text = (self._text + text)[-TAIL_CHARS:]
            self.draw()

    def reading(self, held: int, total: int) -> None:
        with self._lock:
            self._read = (held, total)
            self.draw()

    def line(self) -> str:
        """What the line says now (empty: nothing runs)."""
        if not self._stage:
            return ""
        seconds = time.monotonic() - self._since
        said = " ".join(self._text.split())
        if not said and self._read and self._read[0] < self._read[1]:
            said = f"read {self._read[0]:,} of {self._read[1]:,} prompt tokens"
        return f"{self._stage} {seconds:.0f}s" + (f": {said}" if said else "")

    def draw(self) -> None:
        with self._lock:
            line = self.line()
            if not line:
                return self.erase()
            width = (self.width or shutil.get_terminal_size().columns) - 1
            if len(line) > width:  # the tail is what is new
                line = line[: max(0, width // 3)] + "…" + line[len(line) - (width - width // 3 - 1):]
            self.stream.write(ERASE + line)
            self.stream.flush()
            self._shown = True

    def erase(self) -> None:
        with self._lock:
            if self._shown:
                self.stream.write(ERASE)
                self.stream.flush()
                self._shown = False


class _ErasingStream:
    """A log handler's stream that erases the live line before each record."""

    def __init__(self, stream: TextIO, line: LiveLine):
        self._stream, self._line = stream, line

    def write(self, text: str) -> int:
        self._line.erase()
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()


@contextmanager
def live_line(stream: TextIO) -> Iterator[LiveLine]:
    """A :class:`LiveLine` on ``stream``, refreshed every half second (so a long prefill shows its seconds), with
    the log handlers that write to ``stream`` erasing it first; erased when the block ends."""
    line = LiveLine(stream)
    handlers = [h for h in logging.getLogger().handlers
                if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) is stream]
    for handler in handlers:
        handler.setStream(_ErasingStream(stream, line))  # type: ignore[arg-type]
    stop = threading.Event()

    def refresh() -> None:
        while not stop.wait(REFRESH_SECONDS):
            line.draw()

    ticker = threading.Thread(target=refresh, name="ragfunnel-live-line", daemon=True)
    ticker.start()
    try:
        yield line
    finally:
        stop.set()
        ticker.join()
        line.erase()
        for handler in handlers:
            handler.setStream(stream)
