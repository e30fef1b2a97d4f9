"""A reader run in a process of its own: the PDF reader (:mod:`ragfunnel.documents.pdf_child`) and the OCR engine
(:mod:`ragfunnel.documents.ocr_child`) each read a file under an address-space limit, in their own process group,
killed whole when their time is up or when the reading is refused. The child writes one JSON object a line to
stdout; how it ended is one :class:`InputError` naming the file and the option that raises the limit it hit.

The child scripts run by path, not as modules (``python -P script.py``): importing the ragfunnel package would
multiply their start-up time, and ``-P`` keeps the script's folder off ``sys.path``, where ``html.py`` would shadow
the standard library's ``html``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ragfunnel.documents.child_io import OUT_OF_MEMORY
from ragfunnel.errors import InputError, option


def child_command(script: str) -> list[str]:
    """How to start the child script ``script`` (a file beside this module)."""
    return [sys.executable, "-P", str(Path(__file__).with_name(script))]


@dataclass(frozen=True)
class Bounds:
    """What a child may take, with the options that raise each limit, and what a crash is called."""

    memory_mb: float
    memory_option: str
    seconds: float
    seconds_option: str
    crashed: str  # "{name}" and "{problem}": the line for a child that failed otherwise


class ReaderProcess:
    """One child reading one file: ``messages()`` yields what it writes; leaving the ``with`` block kills it if
    it still runs (the reading was refused part way)."""

    def __init__(self, argv: list[str], name: str, bounds: Bounds):
        self.name, self.bounds = name, bounds
        self.errors = tempfile.TemporaryFile()  # a file, not a pipe: what the child says there never blocks it
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.errors,
                                        close_fds=True, start_new_session=True)
        self.timed_out = False
        self.timer = threading.Timer(bounds.seconds, self._time_up)
        self.timer.start()

    def __enter__(self) -> ReaderProcess:
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop_timer()
        if self.process.poll() is None:  # reading was refused part way: nothing more is wanted from it
            self._kill()
        self.process.wait()
        self.process.stdout.close()
        self.errors.close()

    def messages(self) -> Iterator[dict]:
        """What the child writes, a message at a time; once it stops, an InputError unless it finished."""
        for line in self.process.stdout:
            if not line.endswith(b"\n"):  # cut off where the child was killed
                break
            yield json.loads(line)
        self._stop_timer()  # before the child is reaped, so the timer never signals a process id reused since
        status = self.process.wait()
        if status == 0:  # finished, even if its time ran out as it did
            return
        bounds = self.bounds
        if self.timed_out:
            raise InputError(f"reading {self.name} took over {bounds.seconds:g} s; "
                             f"raise the limit with {option(bounds.seconds_option)}")
        if status == OUT_OF_MEMORY or status < 0:  # a native library aborts when an allocation fails
            raise InputError(f"reading {self.name} needed more than {bounds.memory_mb:g} MB{_how(status)}; "
                             f"raise it with {option(bounds.memory_option)}")
        raise InputError(bounds.crashed.format(name=self.name, problem=f"its reader failed: {self._last_error()}"))

    def _time_up(self) -> None:
        self.timed_out = True
        self._kill()

    def _kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended by itself meanwhile
            pass

    def _stop_timer(self) -> None:
        self.timer.cancel()
        self.timer.join()

    def _last_error(self) -> str:
        self.errors.seek(max(0, self.errors.seek(0, os.SEEK_END) - 1000))
        lines = self.errors.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no message"


def _how(status: int) -> str:
    """Which signal ended the child, if one did: a crash that is not about memory says so."""
    return f" (its reader died of {signal.Signals(-status).name})" if status < 0 else ""
