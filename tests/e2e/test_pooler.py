"""numerator behind a real PgBouncer in transaction pooling mode (docs/deploy.md, "Behind a
pooler"): `numerator up` with DATABASE_POOLER=transaction on the embedded path and on the AWS
path (moto, two batchers; the server edge and the Lambda edge, whose containers open a
connection per use), two workers each, under recorded clients that cut
and retry keyed requests, held by the history checker (tests/history.py): no value twice, every
gap explained in the report, the audit export and `audit verify` sound. PgBouncer keeps 4 server
sessions for the stack's dozen client connections, so transactions change sessions all along."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import httpx
import pytest

from numerator import local
from tests.conftest import temporary_pgserver
from tests.e2e.service import Service
from tests.history import Client, asked, settle
from tests.pgbouncer import pgbouncer

pytestmark = pytest.mark.slow

CLIENTS = 8
LOAD_S = 4.0
# As the fault matrix cuts (test_matrix.py). Not on the Lambda edge: on moto its requests take
# 1-2 s on a loaded machine, and a run cut within the matrix's 1.5 s delivered nothing.
CUT_MS: dict[str, tuple[float, float] | None] = {
    "embedded": (0, 300),
    "server": (0, 900),
    "lambda": None,
}


@pytest.fixture(scope="module")
def pooled_url() -> Iterator[str]:
    """A Postgres of its own (no other test's API keys close its loopback access), reached
    through PgBouncer in transaction mode."""
    with temporary_pgserver() as server, pgbouncer(server.get_uri()) as url:
        yield url


@pytest.mark.parametrize("path", ["embedded", "server", "lambda"])
def test_recorded_clients_through_pgbouncer(path: str, pooled_url: str) -> None:
    env = {"DATABASE_POOLER": "transaction", "LEASE_TTL_S": "3"}
    args = ["--database-url", pooled_url, "--workers", "2"]
    with contextlib.ExitStack() as running:
        if path != "embedded":
            moto = running.enter_context(local.moto_server())
            args += ["--aws", moto.url, "--batchers", "2", "--edge", path]
        service = running.enter_context(Service(*args, env=env))
        counters = [f"pooled-{path}-a", f"pooled-{path}-b"]
        with httpx.Client(base_url=service.url, timeout=30) as http:
            for name in counters:
                made = asked(http, "/counters", "POST", json={"name": name})
                assert made.status_code == 201, made.text
        client = Client(service.port, counters, cut_ms=CUT_MS[path], seed=49)

        async def run() -> None:
            load = asyncio.create_task(client.run(CLIENTS, LOAD_S + 20))
            await asyncio.sleep(LOAD_S)
            client.stop()
            await load

        began = time.monotonic()
        asyncio.run(run())
        # A Lambda container cannot cancel what its client cut (docs/invoices.md), as on AWS.
        rules = {"cuts_cancel": path != "lambda"}
        broken, tally, _ = settle(service.url, client.history, counters, within=5.0, **rules)
        print(f"\nPOOLED {path} ({time.monotonic() - began:.0f} s): {tally.line()}")
        assert tally.delivered > 20, f"too little went through to prove anything: {tally.line()}"
        assert not broken, "\n".join(broken[:40]) + f"\n{service.said()[-3000:]}"
