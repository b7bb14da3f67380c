"""The app factory: the route table's routes (functions/table.py), problem handlers, and the
lifespan of whatever the caller wires in."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from functions.edge import Edge
from functions.fastpath import FastPath
from functions.operations import Table
from functions.problems import Kind, Problem, handle_problem, unavailable
from functions.table import TABLE
from infra.errors import StoreError, Unavailable

log = logging.getLogger("numerator.edge")

Lifespan = Callable[[Starlette], AbstractAsyncContextManager[None]]


async def handle_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return Problem(Kind.NOT_FOUND, f"no route for {request.url.path}").response()
    if exc.status_code == 405:
        problem = Problem(Kind.METHOD_NOT_ALLOWED, f"{request.method} is not allowed here")
        problem.headers.update(exc.headers or {})
        return problem.response()
    return Problem(Kind.INVALID_REQUEST, str(exc.detail), status=exc.status_code).response()


async def handle_unavailable(request: Request, exc: Exception) -> Response:
    if isinstance(exc, StoreError):  # Postgres refused, not for want of availability: a bug
        log.error("Postgres refused %s %s: %s", request.method, request.url.path, exc)
    retry_after = request.app.state.edge.settings.edge.retry_after_s
    return unavailable(str(exc), retry_after).response(request.url.path)


async def handle_crash(request: Request, exc: Exception) -> Response:
    return Problem(Kind.INTERNAL, "an unexpected error; it has been logged").response()


def create_app(
    edge: Edge | None = None, lifespan: Lifespan | None = None, table: Table = TABLE
) -> FastPath:
    """The numerator app, its routes those of `table`. Pass `edge` for a wired app, or a
    `lifespan` that sets `app.state.edge` on startup (how server workers build their own
    stack)."""

    @asynccontextmanager
    async def nothing(app: Starlette) -> AsyncIterator[None]:
        yield

    handoff = Handoff()
    app = Starlette(
        # FastPath answers the fast operation (POST …/next) in front of this router; its route
        # is here for the 405 of other methods, and sends the bare app's /next (served without
        # FastPath in front) the same way, through FastPath's admission, never around it
        routes=table.routes(handoff),
        exception_handlers={
            Problem: handle_problem,
            HTTPException: handle_http,
            Unavailable: handle_unavailable,
            StoreError: handle_unavailable,
            Exception: handle_crash,
        },
        lifespan=lifespan or nothing,
    )
    app.state.table = table
    if edge is not None:
        app.state.edge = edge
    fast = handoff.path = FastPath(app, table, edge)
    return fast


class Handoff:
    """The endpoint of the fast operation (POST …/next) in the app's router: the FastPath it is
    served by."""

    path: FastPath | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.path is not None, "create_app() sets it"
        await self.path(scope, receive, send)
