"""The HTTP routes' handlers (their methods, paths and scopes: functions/table.py). Each handler
validates, talks to the ports, and answers JSON or a problem. A store that cannot serve
(Unavailable, StoreError) becomes a 503 in one handler (functions/app)."""

from __future__ import annotations

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from functions import bodies, validation
from functions.answers import JSON, edge_of
from functions.problems import Kind, Problem, invalid
from infra import keys
from infra.counters import Counter
from infra.errors import (
    CounterExists,
    InvalidCounter,
    InvalidKey,
    KeyExists,
)
from infra.observe.health import verdict


async def create_counter(request: Request) -> Response:
    edge = edge_of(request)
    body = await validation.json_body(request, edge.settings)
    try:
        counter = Counter.parse(body)
    except InvalidCounter as exc:
        raise invalid(exc.field, exc.problem) from None
    try:
        await edge.store.create(counter)
    except CounterExists:
        raise Problem(Kind.COUNTER_EXISTS, f"a counter named {counter.name!r} exists") from None
    return JSON(
        counter.to_json(), status_code=201, headers={"Location": f"/counters/{counter.name}"}
    )


async def get_counter(request: Request) -> Response:
    edge = edge_of(request)
    name = validation.name(request.path_params["name"])
    counter = await edge.store.get(name)
    if counter is None:
        raise Problem(Kind.COUNTER_NOT_FOUND, f"no counter named {name!r}")
    period = counter.period(edge.clock())
    allocated = await edge.store.allocated(name, period)
    body = counter.to_json()
    body["period"] = period
    body["value"] = counter.start - 1 + allocated if allocated else None
    return JSON(body)


async def list_counters(request: Request) -> Response:
    edge = edge_of(request)
    query = validation.checked(bodies.PageQuery, dict(request.query_params), text=True)
    limit, after = query.limit, None if query.after is UNSET else query.after
    if after is not None:
        validation.name(after, "after")
    counters = await edge.store.page(after, limit + 1)
    more = len(counters) > limit
    counters = counters[:limit]
    cursor = counters[-1].name if more and counters else None
    return JSON({"counters": [c.to_json() for c in counters], "next": cursor})


async def create_key(request: Request) -> Response:
    """A new API key; its secret is in this response and nowhere else, ever."""
    edge = edge_of(request)
    body = await validation.json_body(request, edge.settings)
    if not isinstance(body, dict):
        raise invalid("body", 'must be a JSON object: {"name": …, "scopes": […]}')
    try:
        key, secret = keys.new(body.get("name"), body.get("scopes"), edge.clock())
    except InvalidKey as exc:
        raise invalid(exc.field, exc.problem) from None
    try:
        key = await edge.store.add_key(key)
    except KeyExists:
        raise Problem(Kind.KEY_EXISTS, f"an unrevoked key named {key.name!r} exists") from None
    if edge.guard is not None:
        edge.guard.changed()
    return JSON(
        {**key.to_json(), "secret": secret},
        status_code=201,
        headers={"Location": f"/keys/{key.name}", "Cache-Control": "no-store"},
    )


async def list_keys(request: Request) -> Response:
    found = await edge_of(request).store.keys()
    return JSON({"keys": [key.to_json() for key in found]})


async def revoke_key(request: Request) -> Response:
    name = request.path_params["name"]
    edge = edge_of(request)
    key = await edge.store.revoke_key(name)
    if key is None:
        raise Problem(Kind.KEY_NOT_FOUND, f"no unrevoked key named {name[:64]!r}")
    if edge.guard is not None:
        edge.guard.changed()
    return JSON(key.to_json())


async def healthz(request: Request) -> Response:
    """200 when everything this edge needs to hand out values answers (observe.health), else 503
    naming what does not: a load balancer stops sending within seconds."""
    health = edge_of(request).health
    assert health is not None
    status, body = verdict(await health.report(), health.alerts)
    return JSON(body, status_code=status)


async def metrics(request: Request) -> Response:
    edge = edge_of(request)
    metrics = edge.observed() if edge.workers is None else edge.workers.total()
    assert edge.health is not None
    metrics.health(await edge.health.recent())  # as of this scrape, this worker's own
    return Response(metrics.render(), media_type="text/plain; version=0.0.4")


async def openapi(request: Request) -> Response:
    from functions.openapi import served

    return JSON(served(request.app))


async def ping(request: Request) -> Response:
    """A trivial route, the yardstick the benchmark holds /next against."""
    return JSON({"ok": True})
