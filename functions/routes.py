"""The HTTP routes. Each handler validates, talks to the ports, and answers JSON or a problem."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from functions import validation
from functions.edge import Edge
from functions.problems import Problem, invalid, unavailable
from infra.counters import Counter, template
from infra.errors import (
    CounterExists,
    InvalidCounter,
    ReplyTimeout,
    StoreError,
    StreamFull,
    Unavailable,
)
from infra.wire import Record, Reply

# Reply keys: unique across processes (the prefix) and within one (the sequence), cheap to make.
_PREFIX = uuid.uuid4().hex[:16]
_SEQUENCE = itertools.count(1)

REPLY_ERRORS = {
    "counter-not-found": 404,
    "idempotency-key-reused": 422,
    "bad-record": 422,
    "expired": 503,
    "unavailable": 503,
}


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def edge_of(request: Request) -> Edge:
    edge: Edge = request.app.state.edge
    return edge


async def next_values(request: Request) -> Response:
    edge = edge_of(request)
    metrics = edge.metrics
    metrics.next_requests.inc()
    try:
        response = await _next(request, edge)
    except Problem as problem:
        metrics.responses.inc(str(problem.status))
        raise
    metrics.responses.inc("200")
    return response


async def _next(request: Request, edge: Edge) -> Response:
    name = validation.name(request.path_params["name"])
    count = validation.count(request.query_params)
    key = validation.idempotency_key(request.headers)
    settings = edge.settings
    sent = time.time()
    record = Record(
        key=f"{_PREFIX}-{next(_SEQUENCE)}",
        counter=name,
        count=count,
        idempotency_key=key,
        deadline=sent + edge.record_budget,
        sent=sent,
    )
    edge.replies.expect(record.key)
    try:
        await edge.stream.put([record])
    except StreamFull as exc:
        raise unavailable(f"the batcher is saturated: {exc}", settings.retry_after_s) from None
    except Unavailable as exc:
        raise unavailable(str(exc), settings.retry_after_s) from None
    try:
        reply = await edge.replies.wait(record.key, settings.reply_timeout_s)
    except ReplyTimeout as exc:
        raise Problem(504, "reply-timeout", str(exc)) from None
    finally:
        edge.metrics.reply_wait.observe(time.time() - sent)
    return JSON(answer(reply, count, settings.retry_after_s))


def answer(reply: Reply, count: int, retry_after: int) -> dict[str, Any]:
    """The body for a reply, or the problem it stands for."""
    if reply.error is not None:
        status = REPLY_ERRORS.get(reply.error, 500)
        if status == 503:
            raise unavailable(reply.detail or reply.error, retry_after)
        kind = reply.error if reply.error != "bad-record" else "invalid-request"
        raise Problem(status, kind, reply.detail)
    assert reply.day is not None
    render = template(reply.template).render
    if count == 1 and reply.first == reply.last:
        return {
            "counter": reply.counter,
            "value": reply.first,
            "formatted": render(reply.first, reply.day),
        }
    values = [
        {"value": v, "formatted": render(v, reply.day)} for v in range(reply.first, reply.last + 1)
    ]
    return {"counter": reply.counter, "first": reply.first, "last": reply.last, "values": values}


async def create_counter(request: Request) -> Response:
    edge = edge_of(request)
    body = await validation.json_body(request, edge.settings.max_body_bytes)
    try:
        counter = Counter.parse(body)
    except InvalidCounter as exc:
        raise invalid(exc.field, exc.problem) from None
    try:
        await edge.store.create(counter)
    except CounterExists:
        raise Problem(409, "counter-exists", f"a counter named {counter.name!r} exists") from None
    except (Unavailable, StoreError) as exc:
        raise unavailable(str(exc), edge.settings.retry_after_s) from None
    return JSON(
        counter.to_json(), status_code=201, headers={"Location": f"/counters/{counter.name}"}
    )


async def get_counter(request: Request) -> Response:
    edge = edge_of(request)
    name = validation.name(request.path_params["name"])
    try:
        counter = await edge.store.get(name)
        if counter is None:
            raise Problem(404, "counter-not-found", f"no counter named {name!r}")
        period = counter.period(edge.clock())
        allocated = await edge.store.allocated(name, period)
    except (Unavailable, StoreError) as exc:
        raise unavailable(str(exc), edge.settings.retry_after_s) from None
    body = counter.to_json()
    body["period"] = period
    body["value"] = counter.start - 1 + allocated if allocated else None
    return JSON(body)


async def list_counters(request: Request) -> Response:
    edge = edge_of(request)
    limit = validation.page_size(request.query_params)
    after = request.query_params.get("after")
    if after is not None:
        validation.name(after)
    try:
        counters = await edge.store.page(after, limit + 1)
    except (Unavailable, StoreError) as exc:
        raise unavailable(str(exc), edge.settings.retry_after_s) from None
    more = len(counters) > limit
    counters = counters[:limit]
    cursor = counters[-1].name if more and counters else None
    return JSON({"counters": [c.to_json() for c in counters], "next": cursor})


async def healthz(request: Request) -> Response:
    edge = edge_of(request)
    checks = {"store": "ok", "batcher": "ok" if edge.healthy() else "retrying"}
    try:
        await asyncio.wait_for(edge.store.ping(), 1.0)
    except (TimeoutError, Unavailable, StoreError) as exc:
        checks["store"] = f"down: {exc}"
    ok = all(v == "ok" for v in checks.values())
    return JSON({"status": "ok" if ok else "degraded", **checks}, status_code=200 if ok else 503)


async def metrics(request: Request) -> Response:
    edge = edge_of(request)
    edge.observe()
    return Response(edge.metrics.render(), media_type="text/plain; version=0.0.4")


async def openapi(request: Request) -> Response:
    from functions.openapi import SCHEMA

    return JSON(SCHEMA)


async def ping(request: Request) -> Response:
    """A trivial route, the yardstick the benchmark holds /next against."""
    return JSON({"ok": True})
