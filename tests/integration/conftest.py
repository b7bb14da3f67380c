"""Fixtures the integration modules share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest

from infra.settings import Settings
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client
from tests.lambdas import Container, batcher_on
from tests.tamper import NAME, Tampered, take, void


@pytest.fixture
async def tampered(settings: Settings, fresh_database: str) -> AsyncIterator[Tampered]:
    """Values 1-30 of `inv` in 20 frames, void 4 (spoiled) and 20-21 (cancelled), a hole in the
    row ids (for a row forged in the middle), heads kept; verify sound."""
    async with (
        EmbeddedStack(settings.but(database_url=fresh_database)) as stack,
        await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as sql,
        asgi_client(stack.app()) as client,
    ):
        assert (await client.post("/counters", json={"name": NAME})).status_code == 201
        for _ in range(5):
            await take(client)
        await sql.execute(
            "SELECT setval('allocation_frames_id_seq', nextval('allocation_frames_id_seq') + 5)"
        )
        for _ in range(5):
            await take(client)
        for _ in range(3):
            await take(client, 5)
        for _ in range(5):
            await take(client)
        await void(client, 4, 4, "spoiled")
        await void(client, 20, 21, "invoice cancelled: order 17 refunded")
        heads = (await client.get("/audit/heads")).json()["heads"]
        made = Tampered(client, stack, sql, heads)
        sound = await made.verify(anchored=True)
        assert sound["ok"] and sound["anchors"]["held"] == sorted(heads), sound
        report = await made.report()
        assert report["issued"] == 30 and report["breaches"] == [], report
        yield made


@pytest.fixture
def containers() -> Iterator[list[Container]]:
    made: list[Container] = []
    yield made
    for container in made:
        container.close()


@pytest.fixture
def batcher(aws: tuple[Settings, Any]) -> Iterator[Settings]:
    """A batcher on the test's stream and table, in a thread of its own."""
    with batcher_on(aws[0]) as settings:
        yield settings
