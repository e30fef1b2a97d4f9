"""The service's indexes: ``GET /v1/indexes``, ``GET /v1/indexes/{name}`` and ``GET /v1/indexes/{name}/events``
(server-sent ``status`` events as a watched folder's files are read and its index updated), and the watched
folders' threads, started with the app and stopped with it (the router's lifespan)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse

from ragfunnel.serve.answering import ServiceState
from ragfunnel.serve.settings import API
from ragfunnel.serve.watching import index_view, index_views, service_indexes, start_watching, stop_watching
from ragfunnel.serve.wire import event_frame

EVENT_POLL_SECONDS = 0.25  # how often an event stream looks for a change of its index
KEEPALIVE_SECONDS = 15.0  # a comment this often keeps proxies from closing a quiet stream


def _service(request: Request) -> ServiceState:
    state: ServiceState | None = request.app.state.service
    if state is None:  # the app has not started (its lifespan makes the state)
        raise HTTPException(503, "the server is starting; send the request again in a few seconds")
    return state


Service = Annotated[ServiceState, Depends(_service)]


@asynccontextmanager
async def watching(app: FastAPI) -> AsyncIterator[None]:
    """Start the watched folders once the service is up (the app's own lifespan runs first), stop them before it
    stops."""
    state: ServiceState = app.state.service
    await asyncio.to_thread(start_watching, state)  # opens the indexes kept from an earlier run
    try:
        yield
    finally:
        await asyncio.to_thread(stop_watching, state)


def index_routes() -> APIRouter:
    """Each index the service searches and answers from, and the state of each watched folder."""
    routes = APIRouter(prefix=API, lifespan=watching)

    @routes.get("/indexes")
    async def list_indexes(state: Service) -> list[dict[str, Any]]:
        """Every index: the fixed ones (``--index``), then the watched folders (``--watch``) with their files,
        the files pending, the last update, the files that failed with why, and the update under way."""
        return index_views(*service_indexes(state))

    @routes.get("/indexes/{name}", responses={404: {"description": "The server has no index of this name."}})
    async def get_index(name: str, state: Service) -> dict[str, Any]:
        return index_view(name, *service_indexes(state))

    @routes.get("/indexes/{name}/events", response_class=StreamingResponse,
                responses={404: {"description": "The server has no index of this name."}})
    async def index_events(name: str, request: Request, state: Service) -> StreamingResponse:
        """Server-sent ``status`` events: the index as ``GET /v1/indexes/{name}`` describes it, now and at each
        change (a file noticed, read, the index updated), until the client goes away; a fixed index sends one."""
        first = index_view(name, *service_indexes(state))  # 404 before the stream starts

        async def events() -> AsyncIterator[str]:
            yield event_frame("status", first)
            if name not in state.watched:
                return
            seen, quiet = json.dumps(first, sort_keys=True), 0.0
            while not await request.is_disconnected():
                await asyncio.sleep(EVENT_POLL_SECONDS)
                view = index_view(name, *service_indexes(state))
                now = json.dumps(view, sort_keys=True)
                if now != seen:
                    seen, quiet = now, 0.0
                    yield event_frame("status", view)
                elif (quiet := quiet + EVENT_POLL_SECONDS) >= KEEPALIVE_SECONDS:
                    quiet = 0.0
                    yield ": still watching\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    return routes
