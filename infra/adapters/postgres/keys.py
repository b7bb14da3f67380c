"""The Keys role: API keys as stored (hashes), and news of their changes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from infra.adapters.postgres.pool import Pool
from infra.errors import KeyExists, StoreUnavailable
from infra.keys import Key

KEYS_CHANNEL = "numerator_keys"  # NOTIFY'd when a key is created or revoked
# Behind a transaction pooler, where a LISTEN holds no session: how often the keys are looked at
# for a change instead (a revoked key stops within this on every long-running edge).
KEYS_POLL_S = 1.0

KEY_COLUMNS = "id, name, digest, scopes, created_at, last_used_at, revoked_at"


def _key(row: tuple[Any, ...]) -> Key:
    key_id, name, digest, scopes, created, last_used, revoked = row
    return Key(key_id, name, bytes(digest), tuple(scopes), created, last_used, revoked)


class PostgresKeys:
    def __init__(self, db: Pool) -> None:
        self.db = db

    async def add_key(self, key: Key) -> Key:
        try:
            rows = await self._told(
                "INSERT INTO api_keys (id, name, digest, scopes) VALUES (%s, %s, %s, %s)"
                f" RETURNING {KEY_COLUMNS}",
                (key.id, key.name, key.digest, list(key.scopes)),
            )
        except pgerrors.UniqueViolation as exc:
            raise KeyExists(key.name) from exc
        return _key(rows[0])

    async def keys(self) -> list[Key]:
        rows = await self.db.fetch(
            f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY name, created_at", ()
        )
        return [_key(row) for row in rows]

    async def key(self, key_id: str) -> Key | None:
        rows = await self.db.fetch(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE id = %s", (key_id,))
        return _key(rows[0]) if rows else None

    async def revoke_key(self, name: str) -> Key | None:
        rows = await self._told(
            "UPDATE api_keys SET revoked_at = now() WHERE name = %s AND revoked_at IS NULL"
            f" RETURNING {KEY_COLUMNS}",
            (name,),
        )
        return _key(rows[0]) if rows else None

    async def _told(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """A change to the keys, and a notice of it on KEYS_CHANNEL in the same transaction:
        every edge that follows `key_changes` reloads its copy as it commits."""
        async with self.db.connection() as conn, conn.transaction():
            cur = await conn.execute(sql, params)
            found = await cur.fetchall()
            if found:
                await conn.execute(f"NOTIFY {KEYS_CHANNEL}")
            return found

    async def key_changes(self) -> AsyncIterator[None]:
        """Once listening, and again whenever a key is created or revoked through any
        numerator (NOTIFY on KEYS_CHANNEL), on a connection of its own; StoreUnavailable when
        that connection cannot be made or is lost. Behind a transaction pooler, polled."""
        if self.db.pooled:
            async for _ in self._polled():
                yield
            return
        if not self.db.url:
            raise StoreUnavailable("no Postgres URL to listen on for key changes")
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.db.url, autocommit=True, connect_timeout=2
            )
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot listen for key changes: {exc}") from exc
        async with conn:
            try:
                await conn.execute(f"LISTEN {KEYS_CHANNEL}")
                yield  # listening: whatever changed before is in the next reload
                async for _ in conn.notifies():
                    yield
            except psycopg.Error as exc:
                raise StoreUnavailable(f"lost the connection for key changes: {exc}") from exc

    async def _polled(self) -> AsyncIterator[None]:
        """Once, and again whenever the number of keys or of revoked keys has moved, looked up
        every KEYS_POLL_S: keys are never deleted, so each create and each revoke moves one."""
        seen: tuple[Any, ...] | None = None
        while True:
            found = (await self.db.fetch("SELECT count(*), count(revoked_at) FROM api_keys", ()))[0]
            if found != seen:
                seen = found
                yield
            await asyncio.sleep(KEYS_POLL_S)

    async def touch_keys(self, used: Mapping[str, datetime]) -> None:
        if used:
            await self.db.fetch(
                "UPDATE api_keys k SET last_used_at = greatest(k.last_used_at, u.at)"
                " FROM unnest(%s::text[], %s::timestamptz[]) AS u(id, at)"
                " WHERE k.id = u.id RETURNING 1",
                (list(used), list(used.values())),
            )
