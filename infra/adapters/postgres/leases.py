"""The Leases role: who reads which shard (fenced leases), batchers' and edges' liveness, and
shards read to their end."""

from __future__ import annotations

import time
from collections.abc import Collection

from infra.adapters.postgres import trail
from infra.adapters.postgres.pool import Pool
from infra.adapters.postgres.statements import lost
from infra.ledger import EdgeEnd
from infra.ports import Lease


class PostgresLeases:
    def __init__(self, db: Pool) -> None:
        self.db = db

    async def acquire(
        self, stream: str, shard: str, owner: str, ttl: float, alone: bool = False
    ) -> Lease | None:
        fetch = self.db.fetch_alone if alone else self.db.fetch
        rows = await fetch(
            "INSERT INTO leases AS l (stream, shard, owner, epoch, sequence, expires_at)"
            " VALUES (%s, %s, %s, 1, NULL, now() + make_interval(secs => %s))"
            " ON CONFLICT (stream, shard) DO UPDATE"
            " SET owner = excluded.owner, expires_at = excluded.expires_at,"
            "     epoch = CASE WHEN l.owner = excluded.owner THEN l.epoch ELSE l.epoch + 1 END"
            " WHERE l.owner = excluded.owner OR l.expires_at < now()"
            " RETURNING epoch, sequence, applied",
            (stream, shard, owner, ttl),
        )
        if not rows:
            return None
        epoch, sequence, applied = rows[0]
        return Lease(
            stream, shard, owner, epoch, sequence, None if applied is None else int(applied)
        )

    async def members(self, stream: str, owner: str, ttl: float) -> list[str]:
        rows = await self.db.fetch(
            "WITH seen AS (INSERT INTO batchers (stream, owner) VALUES (%(stream)s, %(owner)s)"
            "  ON CONFLICT (stream, owner) DO UPDATE SET seen_at = now()"
            "  RETURNING owner, joined_at),"
            " gone AS (DELETE FROM batchers WHERE stream = %(stream)s"
            "  AND seen_at < now() - make_interval(secs => %(ttl)s * 10))"
            " SELECT owner, joined_at FROM seen UNION ALL"
            " SELECT owner, joined_at FROM batchers WHERE stream = %(stream)s"
            "  AND owner <> %(owner)s AND seen_at >= now() - make_interval(secs => %(ttl)s)"
            " ORDER BY joined_at, owner",
            {"stream": stream, "owner": owner, "ttl": ttl},
        )
        return [str(row[0]) for row in rows]

    async def alive(self, stream: str, owner: str) -> None:
        await self.db.fetch(
            "INSERT INTO batchers (stream, owner) VALUES (%s, %s)"
            " ON CONFLICT (stream, owner) DO UPDATE SET seen_at = now() RETURNING 1",
            (stream, owner),
        )

    async def alive_batchers(self, stream: str, within: float) -> int:
        rows = await self.db.fetch(
            "SELECT count(*) FROM batchers WHERE stream = %s"
            " AND seen_at >= now() - make_interval(secs => %s)",
            (stream, within),
        )
        return int(rows[0][0])

    async def edge_seen(self, edge: str, settled: float, ended: bool = False) -> None:
        # As an age on Postgres's clock, which dates the values issued: the edge's own clock may
        # be off by more than the moment's whole margin. Measured once a connection is in hand,
        # so that a wait for one does not move the moment later.
        async with self.db.connection() as conn:
            await conn.execute(
                "INSERT INTO edges (id, settled_at)"
                " VALUES (%s, now() - make_interval(secs => %s))"
                " ON CONFLICT (id) DO UPDATE SET seen_at = now(),"
                " settled_at = excluded.settled_at, ended_at = CASE WHEN %s THEN now() END",
                (edge, max(0.0, time.time() - settled), ended),
            )

    async def dead_edges(self, edges: Collection[str], silent: float) -> dict[str, EdgeEnd]:
        if not edges:
            return {}
        async with self.db.connection() as conn:
            return await trail.dead_edges(conn, edges, silent)

    async def leave(self, stream: str, owner: str) -> None:
        await self.db.fetch(
            "DELETE FROM batchers WHERE stream = %s AND owner = %s RETURNING 1", (stream, owner)
        )

    async def release(self, lease: Lease, forget: bool) -> None:
        where = " WHERE stream = %s AND shard = %s AND owner = %s AND epoch = %s"
        params = (lease.stream, lease.shard, lease.owner, lease.epoch)
        if forget:
            await self.db.fetch("DELETE FROM leases" + where + " RETURNING 1", params)
        else:
            await self.db.fetch(
                "UPDATE leases SET expires_at = now()" + where + " RETURNING 1", params
            )

    async def end(self, lease: Lease) -> None:
        rows = await self.db.fetch(
            "UPDATE leases SET ended = true"
            " WHERE stream = %s AND shard = %s AND owner = %s AND epoch = %s RETURNING 1",
            (lease.stream, lease.shard, lease.owner, lease.epoch),
        )
        if not rows:
            raise lost(lease)

    async def ended(self, stream: str, shard: str) -> bool:
        rows = await self.db.fetch(
            "SELECT ended FROM leases WHERE stream = %s AND shard = %s", (stream, shard)
        )
        return bool(rows and rows[0][0])
