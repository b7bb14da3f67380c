"""The baselines `--compare` runs beside numerator: one Postgres round trip per request.

    rowlock   UPDATE baseline_counters SET value = value + N … RETURNING value
              (the design that tops out first under a hot counter: every request waits for the
              row lock of the one before it)
    sequence  SELECT nextval(…) per value (fast, but no per-period reset, no template and
              no contiguous ranges for count > 1)

Served by the same HTTP server as numerator, on the same Postgres, with the same routes for
create and next, so that only the allocation strategy differs. Not part of the product's routes.
The pool is larger than numerator's (BASELINE_POOL_MAX, default 16): a per-request design needs
a connection per request in flight, and starving it would flatter numerator.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import psycopg
import psycopg_pool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from infra.counters import NAME

MODES = ("rowlock", "sequence")

SCHEMA = """
CREATE TABLE IF NOT EXISTS baseline_counters (name text PRIMARY KEY, value bigint NOT NULL)
"""


class BaselineTally:
    """What a baseline counts for /metrics: requests, and transactions that took values."""

    def __init__(self) -> None:
        self.requests = 0
        self.transactions = 0

    def render(self) -> str:
        return (
            "# TYPE baseline_requests_total counter\n"
            f"baseline_requests_total {self.requests}\n"
            "# TYPE baseline_transactions_total counter\n"
            f"baseline_transactions_total {self.transactions}\n"
        )


def json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


def problem(status: int, detail: str) -> Response:
    body = {"type": "urn:numerator:problem:baseline", "status": status, "detail": detail}
    return Response(orjson.dumps(body), status, media_type="application/problem+json")


def sequence_name(name: str) -> str:
    return "baseline_seq_" + re.sub(r"[^a-z0-9_]", "_", name.lower())[:40] + f"_{len(name)}"


def answer(name: str, values: list[int]) -> Response:
    """numerator's answer shape: one value, or a range with each value."""
    if len(values) == 1:
        return json({"counter": name, "value": values[0], "formatted": str(values[0])})
    return json(
        {
            "counter": name,
            "first": values[0],
            "last": values[-1],
            "values": [{"value": v, "formatted": str(v)} for v in values],
        }
    )


class Baseline:
    """One baseline's routes on its pool: create and next as numerator's, metrics and health."""

    def __init__(self, mode: str, url: str, pool_max: int) -> None:
        if mode not in MODES:
            raise ValueError(f"baseline mode must be one of {MODES}")
        self.mode, self.tally = mode, BaselineTally()
        self.pool = psycopg_pool.AsyncConnectionPool(
            url, min_size=2, max_size=pool_max, open=False, kwargs={"autocommit": True}
        )

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.pool.open()
        async with self.pool.connection() as conn:
            await conn.execute(SCHEMA)
        yield
        await self.pool.close()

    async def create(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        name = body.get("name", "") if isinstance(body, dict) else ""
        if not isinstance(name, str) or not NAME.fullmatch(name):
            return problem(422, "bad name")
        start = int(body.get("start", 1))
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO baseline_counters VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (name, start - 1),
            )
            if await cur.fetchone() is None:
                return problem(409, "exists")
            await conn.execute(
                f"CREATE SEQUENCE IF NOT EXISTS {sequence_name(name)} START {max(start, 1)}"
            )
        return json({"name": name, "start": start}, 201)

    async def take(self, request: Request) -> Response:
        name = request.path_params["name"]
        count = int(request.query_params.get("count", "1"))
        if not NAME.fullmatch(name) or not 1 <= count <= 1000:
            return problem(422, "bad name or count")
        self.tally.requests += 1
        try:
            async with self.pool.connection() as conn:
                values = await self.allocate(conn, name, count)
        except psycopg.errors.UndefinedTable:
            values = []
        except psycopg.Error as exc:
            return problem(503, str(exc))
        self.tally.transactions += 1
        if not values:
            return problem(404, f"no counter named {name!r}")
        return answer(name, values)

    async def allocate(
        self, conn: psycopg.AsyncConnection[Any], name: str, count: int
    ) -> list[int]:
        """`count` values of `name` in one round trip, the baseline's way; none if no counter."""
        if self.mode == "rowlock":
            cur = await conn.execute(
                "UPDATE baseline_counters SET value = value + %s WHERE name = %s RETURNING value",
                (count, name),
            )
            row = await cur.fetchone()
            return list(range(row[0] - count + 1, row[0] + 1)) if row else []
        cur = await conn.execute(
            f"SELECT nextval('{sequence_name(name)}') FROM generate_series(1, %s)", (count,)
        )
        return [r[0] for r in await cur.fetchall()]

    async def metrics(self, request: Request) -> Response:
        return Response(self.tally.render(), media_type="text/plain")

    async def healthz(self, request: Request) -> Response:
        return json({"status": "ok", "baseline": self.mode})

    async def ping(self, request: Request) -> Response:
        return json({"ok": True})


def create_app(mode: str, url: str, pool_max: int) -> Starlette:
    baseline = Baseline(mode, url, pool_max)
    return Starlette(
        routes=[
            Route("/counters", baseline.create, methods=["POST"]),
            Route("/counters/{name}/next", baseline.take, methods=["POST"]),
            Route("/metrics", baseline.metrics),
            Route("/healthz", baseline.healthz),
            Route("/ping", baseline.ping, methods=["GET", "POST"]),
        ],
        lifespan=baseline.lifespan,
    )


def app_from_env() -> Starlette:
    """The granian factory: BASELINE_MODE, DATABASE_URL and BASELINE_POOL_MAX from the env."""
    from infra.run.server import tune_gc

    tune_gc()  # the same process settings as numerator's workers
    return create_app(
        os.environ.get("BASELINE_MODE", "rowlock"),
        os.environ["DATABASE_URL"],
        int(os.environ.get("BASELINE_POOL_MAX", "16")),
    )


def main() -> None:
    import argparse

    from infra.run.server import serve

    parser = argparse.ArgumentParser(description="serve a baseline (see bench/baseline.py)")
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    env = {"BASELINE_MODE": args.mode, "DATABASE_URL": args.database_url}
    serve("bench.baseline:app_from_env", args.host, args.port, args.workers, env=env)


if __name__ == "__main__":
    main()
