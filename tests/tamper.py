"""The tamper suites' live audit trail (tests/integration/test_tamper*.py): a service that handed
out 30 values of `inv`, voided some and kept its heads (`Tampered`; the fixture `tampered` is in
tests/integration/conftest.py), the SQL that edits it, and what reads its verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import psycopg

from numerator.stack import EmbeddedStack

NAME = "inv"


@dataclass
class Tampered:
    client: httpx.AsyncClient
    stack: EmbeddedStack
    sql: psycopg.AsyncConnection[tuple[Any, ...]]
    heads: dict[str, dict[str, Any]]
    """The heads as they were before any edit: what an anchor sink would hold."""

    async def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        cur = await self.sql.execute(sql.encode(), params)
        return await cur.fetchall() if cur.description else []

    async def chain(self) -> tuple[str, list[int]]:
        """The chain of the counter's rows, and its rows' ids in order."""
        found = await self.rows(
            "SELECT chain, id FROM allocation_frames WHERE counters @> ARRAY[%s] ORDER BY id",
            NAME,
        )
        return found[0][0], [row[1] for row in found]

    async def verify(self, anchored: bool = False) -> dict[str, Any]:
        if anchored:
            answer = await self.client.post("/audit/verify", json={"heads": self.heads})
        else:
            answer = await self.client.get("/audit/verify")
        assert answer.status_code in (200, 409), answer.text
        body: dict[str, Any] = answer.json()
        assert (answer.status_code == 200) is body["ok"] is (not body["breaches"])
        return body

    async def report(self) -> dict[str, Any]:
        answer = await self.client.get(f"/counters/{NAME}/report")
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body


async def take(client: httpx.AsyncClient, count: int = 1, name: str = NAME) -> httpx.Response:
    answer = await client.post(f"/counters/{name}/next", params={"count": count})
    assert answer.status_code == 200, answer.text
    return answer


async def void(client: httpx.AsyncClient, first: int, last: int, reason: str) -> None:
    body = {"first": first, "last": last, "reason": reason}
    answer = await client.post(f"/counters/{NAME}/void", json=body)
    assert answer.status_code == 200, answer.text


def named(found: dict[str, Any], table: str, row: Any = None) -> list[dict[str, Any]]:
    """The breaches of `table` (and `row`) verify names; fails when there is none."""
    hits = [
        b for b in found["breaches"] if b["table"] == table and (row is None or b["row"] == row)
    ]
    assert not found["ok"] and hits, found["breaches"]
    return hits


REHASH = """DO $$
DECLARE r record; last bytea;
BEGIN
    last := coalesce((SELECT prev FROM allocation_frames WHERE id = {first}), '\\x'::bytea);
    IF {genesis} THEN last := '\\x'::bytea; END IF;
    FOR r IN SELECT id FROM allocation_frames WHERE chain = '{chain}' AND id >= {first}
             ORDER BY id LOOP
        UPDATE allocation_frames f SET prev = last, hash = sha256(last || ledger_content(
            f.stream, f.shard, f.sequence, f.ranges, f.detail, f.committed_at, f.keep_until))
        WHERE f.id = r.id RETURNING f.hash INTO last;
    END LOOP;
END $$"""
