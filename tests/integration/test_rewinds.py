"""A rewind as Postgres shows it after a failover to a standby that lacked the primary's last
commits: the counter's row and its newest audit rows forgotten, values clients hold above them.
The batcher that handed them out refuses the counter (503, type `rewound`) and records the rewind;
a batcher started afterwards (its memory gone) refuses it from that record alone; `numerator
counters mend` serves it again from the value after the highest handed out. (The failover itself,
under load: tests/e2e/test_failover.py.)"""

from __future__ import annotations

import subprocess
import sys

import httpx
import psycopg

from infra.adapters.postgres import PostgresStore
from infra.settings import Settings
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client

NAME = "inv"


def numerator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "numerator", *args], capture_output=True, text=True, timeout=60
    )


async def take(stack: EmbeddedStack) -> httpx.Response:
    async with asgi_client(stack.app()) as client:
        return await client.post(f"/counters/{NAME}/next")


def refused(answer: httpx.Response) -> bool:
    return (
        answer.status_code == 503
        and answer.json()["type"] == "urn:numerator:problem:rewound"
        and "retry-after" in answer.headers
    )


async def test_a_rewind_is_refused_recorded_and_mended(
    settings: Settings, fresh_database: str
) -> None:
    url = fresh_database
    settings = settings.but(database_url=url)
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        assert (await client.post("/counters", json={"name": NAME})).status_code == 201
        got = [(await client.post(f"/counters/{NAME}/next")).json()["value"] for _ in range(5)]
        assert got == [1, 2, 3, 4, 5]
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as sql:
            await sql.execute("UPDATE counter_values SET allocated = 2")
            await sql.execute("DELETE FROM allocation_frames WHERE (ranges->0->>3)::bigint > 2")
        assert refused(await take(stack))
    store = PostgresStore(url, max_size=1)
    try:
        (rewind,) = await store.rewinds()
        assert (rewind.counter, rewind.period, rewind.held, rewind.last) == (NAME, "", 5, 2)
        async with EmbeddedStack(settings) as fresh:  # remembers nothing it handed out
            assert refused(await take(fresh))
            listed = numerator("counters", "rewinds", "--database-url", url)
            assert f"{NAME} period '': handed out up to 5, Postgres says 2" in listed.stdout
            mended = numerator("counters", "mend", NAME, "--database-url", url)
            assert mended.returncode == 0, mended.stderr
            assert "last value 2 -> 5; values 3 to 5 were handed out" in mended.stdout
            answer = await take(fresh)
            assert answer.status_code == 200 and answer.json()["value"] == 6, answer.text
            # What docs/runbook.md says of the values Postgres forgot: the report names them
            # a gap no audit row explains; the chains that are left verify.
            async with asgi_client(fresh.app()) as client:
                report = (await client.get(f"/counters/{NAME}/report")).json()
                verify = (await client.get("/audit/verify")).json()
            assert report["gaps"] == [[3, 5]] and report["unexplained_gaps"] == 3, report
            assert verify["ok"] is True, verify
        assert await store.rewinds() == []
    finally:
        await store.close()


def test_mend_says_what_it_cannot_do(database_url: str) -> None:
    for args, said in [
        (["nobody"], "no counter named 'nobody'"),
        ([], "name one counter, or give --all"),
    ]:
        done = numerator("counters", "mend", *args, "--database-url", database_url)
        assert done.returncode == 1 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    done = numerator("counters", "mend", "--all", "--database-url", database_url)
    assert done.returncode == 0 and "no counter is rewound" in done.stdout, done.stdout


async def test_mend_past_a_value_without_a_rewind(settings: Settings, fresh_database: str) -> None:
    """A value clients may hold that no batcher saw (one restarted after the failover): the
    operator gives it."""
    async with (
        EmbeddedStack(settings.but(database_url=fresh_database)) as stack,
        asgi_client(stack.app()) as client,
    ):
        assert (await client.post("/counters", json={"name": NAME})).status_code == 201
        assert (await client.post(f"/counters/{NAME}/next")).json()["value"] == 1
        lone = numerator("counters", "mend", NAME, "--database-url", fresh_database)
        assert lone.returncode == 1 and "give --past VALUE" in lone.stderr, lone.stderr
        past = ["counters", "mend", NAME, "--past", "40", "--database-url", fresh_database]
        done = numerator(*past)
        assert "last value 1 -> 40 (no rewind was recorded" in done.stdout, done.stdout
        assert (await client.post(f"/counters/{NAME}/next")).json()["value"] == 41
