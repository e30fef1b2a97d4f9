"""A queued job's result as the response to the client that asked: whole, once it is ready (:func:`outcome`),
or as server-sent events while it is made (:func:`stream`). Past the deadline the client gets 504; a client
that goes away cancels its job; a bug is one JSON line for the client and one log line to report.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragfunnel.errors import RagfunnelError
from ragfunnel.serve.jobs import Job, JobQueue
from ragfunnel.serve.wire import BrowserSafeJSON, event_frame, http_spelling, status_of

log = logging.getLogger("ragfunnel.serve")


async def outcome(jobs: JobQueue, job: Job, request: Request, *, deadline: float) -> Any:
    """``job``'s result; 504 past the deadline. A client that disconnects first cancels the job."""
    result = asyncio.ensure_future(jobs.result(job, deadline=deadline))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({result, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not result.done():  # the client went away: cancelling the wait cancels the job
        result.cancel()
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it
    try:
        return result.result()
    except TimeoutError:
        raise HTTPException(504, f"no result within the deadline of {deadline:g} s") from None
    except (RagfunnelError, StarletteHTTPException):
        raise
    except Exception as e:  # a bug: one JSON line for the client, one log line to report, the server goes on
        return BrowserSafeJSON({"detail": _unexpected(job.label, e)}, status_code=500)


def _unexpected(label: str, error: Exception) -> str:
    log.error("%s failed: unexpected %s: %s", label, type(error).__name__, error)
    return f"{label} failed: unexpected {type(error).__name__}: {error}; this is a bug in ragfunnel, please report it"


async def _disconnected(request: Request) -> None:
    """Return when the client disconnects (the body is read already, so the next message is that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def stream(jobs: JobQueue, work: Callable[[Job], Any], label: str, request: Request, *, deadline: float,
           frame: Callable[[str, Any], str] = event_frame) -> StreamingResponse:
    """Server-sent events: ``token`` as the answering model writes, ``stage_started`` as each stage begins,
    ``stage`` as it ends, ``progress`` as files are read (OCR, a page at a time), then
    ``result`` (the whole answer) or ``error``, each written by ``frame(kind, data)`` (ragfunnel's own
    events, or OpenAI's chunks). A client that goes away cancels its job."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def emit(kind: str, data: Any) -> None:  # from the worker thread
        loop.call_soon_threadsafe(events.put_nowait, (kind, data))

    job = jobs.submit(work, label=label, on_text=lambda t: emit("token", {"text": t}),
                      on_stage=lambda stage: emit("stage", stage.to_dict()),
                      on_stage_started=lambda name: emit("stage_started", {"name": name}),
                      on_progress=lambda progress: emit("progress", dict(progress)))

    async def finish() -> None:
        try:
            result = await jobs.result(job, deadline=deadline)
        except TimeoutError:
            await events.put(("error", {"status": 504, "detail": f"no answer within {deadline:g} s"}))
        except RagfunnelError as e:
            await events.put(("error", {"status": status_of(e), "detail": e.spelled(http_spelling)}))
        except Exception as e:  # a bug: the client still gets an answer, the log one line to report
            await events.put(("error", {"status": 500, "detail": _unexpected(label, e)}))
        else:
            await events.put(("result", result))
        finally:
            await events.put(("end", None))

    async def body() -> AsyncIterator[str]:
        waiter = asyncio.create_task(finish())
        try:
            while (event := await events.get())[0] != "end":
                text = frame(*event)
                if text:
                    yield text
        finally:  # the client disconnected, or the stream ended
            if not job.future.done():
                job.cancel("the client disconnected")
            waiter.cancel()

    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
