"""The server's work queue: one model generation at a time, a bounded queue, deadlines and cancellation.

In-process models answer one prompt at a time anyway, so every job runs on one worker thread in the
order it arrived; a request that finds ``capacity`` jobs already waiting is refused at once (the API
answers 429 with ``Retry-After``) rather than queued without bound. A job can be cancelled — its
deadline passed, its client went away, the server is stopping — while it waits, or while a model is
working: each job carries its own :class:`~ragfunnel.llm.base.Cancellation`, the one every model call
inside the job runs under (:func:`~ragfunnel.llm.base.cancelled_by`), and the models look at it between
prompt slices, decode steps and waits on a server, so the worker is free again within a second or two.
The answering model's text reaches the job's client the same way, through a channel opened around the
job (:func:`~ragfunnel.llm.base.streaming`): the models, shared by every job, hold no job's state.
A cancelled job that is still waiting no longer counts against ``capacity``. Closing the queue (server
shutdown) answers every job at once, waiting and running alike, without waiting for a generation to stop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from ragfunnel.documents.progress import reading_files
from ragfunnel.llm.base import LLM, Cancellation, Cancelled, TextSink, cancelled_by
from ragfunnel.llm.base import streaming as streaming_text

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """The queue holds ``capacity`` jobs; ``retry_after`` is a fair guess of seconds until there is room."""

    def __init__(self, retry_after: int):
        super().__init__(f"the server is busy; retry in about {retry_after} s")
        self.retry_after = retry_after


@dataclass
class Job:
    work: Callable[[Job], Any]
    label: str
    future: Future = field(default_factory=Future)
    on_text: TextSink | None = None  # where the answering model's text goes as it is written
    on_stage: Callable[[Any], None] | None = None  # where each stage of the method goes as it ends
    on_stage_started: Callable[[str], None] | None = None  # where the name of each stage goes as it begins
    on_progress: Callable[[dict[str, Any]], None] | None = None  # where reading progress goes (OCR, a page a time)
    progress: dict[str, Any] | None = None  # the last progress reported: {"what", "done", "total"}
    started: bool = False
    cancellation: Cancellation = field(init=False)  # what every model call of the job runs under
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.cancellation = Cancellation(self.label)

    def cancel(self, why: str) -> None:
        """Stop the job: a running one at its models' next check, a waiting one at once. A waiting job lets go
        of its work (and the request text it holds) now, not when the worker reaches it."""
        if not self.cancellation.cancelled:
            log.info("cancelling %s: %s", self.label, why)
        self.cancellation.cancel(why)
        with self._lock:
            if not self.started:
                self.work, self.on_text, self.on_stage, self.on_stage_started = _cancelled, None, None, None
                self.on_progress = None
                self.settle(error=Cancelled(f"{self.label} was cancelled: {why}"))

    def begin(self) -> Callable[[Job], Any]:
        """The work to run now (the worker calls this); Cancelled if the job was cancelled while it waited."""
        with self._lock:
            self.check()
            self.started = True
            return self.work

    def check(self) -> None:
        """Raise :class:`Cancelled` if the job was cancelled."""
        self.cancellation.check()

    def report(self, what: str, done: int, total: int) -> None:
        """Reading progress, from the worker (a :data:`~ragfunnel.documents.progress.ProgressSink`); a job
        cancelled meanwhile stops here."""
        self.check()
        self.progress = {"what": what, "done": done, "total": total}
        if self.on_progress is not None:
            self.on_progress(self.progress)

    def status(self) -> dict[str, Any]:
        """What ``GET /v1/jobs`` shows of it."""
        return {"label": self.label, "state": "running" if self.started else "waiting", "progress": self.progress}

    def settle(self, *, result: Any = None, error: BaseException | None = None) -> None:
        """Answer whoever waits, once: a job answered at shutdown ignores the worker's later outcome."""
        if self.future.done():
            return
        try:
            if error is None:
                self.future.set_result(result)
            else:
                self.future.set_exception(error)
        except InvalidStateError:  # answered from another thread in between
            pass


def _cancelled(job: Job) -> None:
    raise Cancelled(f"{job.label} was cancelled")


class JobQueue:
    """Runs jobs one at a time on a worker thread, each inside its own cancellation and, when a job has a
    client to stream to, a channel for the text of ``streaming``, the model whose text is the answer (the
    strong one). The queue writes nothing onto the models."""

    def __init__(self, *, capacity: int = 8, streaming: LLM | None = None):
        self.capacity = capacity
        self._streaming = streaming
        self._waiting: queue.Queue[Job | None] = queue.Queue()
        self._live: list[Job] = []  # waiting + running
        self._lock = threading.Lock()
        self._closed = False
        self._seconds = 20.0  # running mean of a job's seconds, for Retry-After
        self._thread = threading.Thread(target=self._loop, name="ragfunnel-serve-worker", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Jobs waiting or running, less the cancelled ones still waiting for the worker to skip them."""
        with self._lock:
            return sum(job.started or not job.cancellation.cancelled for job in self._live)

    def submit(self, work: Callable[[Job], Any], *, label: str, on_text: TextSink | None = None,
               on_stage: Callable[[Any], None] | None = None,
               on_stage_started: Callable[[str], None] | None = None,
               on_progress: Callable[[dict[str, Any]], None] | None = None) -> Job:
        """Queue ``work(job)``; raises :class:`QueueFull` when ``capacity`` jobs are already pending."""
        if self._closed:
            raise Cancelled("the server is stopping; send the request to it again once it is back")
        pending = self.pending
        job = Job(work, label, on_text=on_text, on_stage=on_stage, on_stage_started=on_stage_started,
                  on_progress=on_progress)
        with self._lock:
            if pending >= self.capacity:
                raise QueueFull(max(1, math.ceil(pending * self._seconds)))
            self._live.append(job)
        self._waiting.put(job)
        return job

    async def result(self, job: Job, *, deadline: float) -> Any:
        """The job's result, waiting at most ``deadline`` seconds (then it is cancelled: TimeoutError)."""
        outcome = asyncio.wrap_future(job.future)
        try:
            return await asyncio.wait_for(asyncio.shield(outcome), timeout=deadline)
        except TimeoutError:
            job.cancel(f"deadline of {deadline:g} s passed")
            raise
        except asyncio.CancelledError:  # the client went away
            job.cancel("the client disconnected")
            raise
        finally:  # a job given up on still ends (in Cancelled): its outcome is seen, not logged as lost
            outcome.add_done_callback(lambda f: f.cancelled() or f.exception())

    def statuses(self) -> list[dict[str, Any]]:
        """Each job running or waiting, in order, with its progress (cancelled ones left waiting are not shown)."""
        with self._lock:
            live = list(self._live)
        return [job.status() for job in live if job.started or not job.cancellation.cancelled]

    def close(self, *, wait: float = 1.0) -> bool:
        """Stop taking jobs, answer every waiting and running one with Cancelled at once, and give the
        worker ``wait`` seconds to leave a running generation. Returns whether the worker has stopped."""
        self._closed = True
        with self._lock:
            live = list(self._live)
        for job in live:
            job.cancel("the server is stopping")
            job.settle(error=Cancelled(f"{job.label} was cancelled: the server is stopping"))
        self._waiting.put(None)
        self._thread.join(timeout=wait)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while (job := self._waiting.get()) is not None:
            started = time.perf_counter()
            try:
                with cancelled_by(job.cancellation), self._answer_text(job), reading_files(job.report):
                    job.settle(result=job.begin()(job))
            except BaseException as e:  # noqa: BLE001 - every failure goes back to the request that asked
                job.settle(error=e)
            finally:
                if job.started:  # a job skipped because it was cancelled while waiting says nothing of speed
                    self._seconds = 0.8 * self._seconds + 0.2 * (time.perf_counter() - started)
                with self._lock:
                    self._live.remove(job)

    def _answer_text(self, job: Job) -> AbstractContextManager[Any]:
        """Where the answering model's text goes while ``job`` runs: to the job's client, if it has one."""
        if self._streaming is None or job.on_text is None:
            return nullcontext()
        client = job.on_text

        def sink(text: str) -> None:
            job.check()  # text nobody waits for is not sent, and a writer that never checks is stopped here
            client(text)

        return streaming_text(self._streaming, sink)
