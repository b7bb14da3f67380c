"""The same chains, byte for byte: a fixed sequence of frames (plain ones, and ones with
Idempotency-Keys, voids, confirmations, a cancel and a refused period) applied on a fresh database
with Postgres's clock stopped, against the audit rows' hashes the frame statements wrote before
they were rewritten (issue 53): kept in `EXPECTED`, recorded from the old statements. A change to
the statements' text that changes a byte an audit row hashes fails here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, date, datetime

import psycopg
import pytest

from batcher.allocation import Basis, apply
from infra.adapters.postgres import PostgresStore
from infra.counters import Counter, Reset
from infra.ports import Entry, Lease
from infra.spans import Span
from infra.wire import Cancel, Confirm, Demand, Record, Void

NOW = datetime(2026, 3, 14, 9, 26, 53, tzinfo=UTC)
KEEP_S = 86_400.0
COUNTERS = {
    "inv": Counter("inv", start=1, template="INV-{value}"),
    "rec": Counter("rec", start=100, reset=Reset.YEARLY, retention_days=30),
    "ack": Counter("ack", start=1, confirm=True),
}
NEVER, YEARLY = "s/0/86400s-never", "s/0/2592000s-yearly"  # the two classes' chains
EXPECTED = [  # (chain, sequence, hash), recorded from the frame statements before issue 53
    (NEVER, "5", "a9de72754ad3a01d9305ae6e39ad0b9249e4f41e4ac4854981493683fcfdf7a6"),
    (YEARLY, "5", "1c1965d87f72c7e26d0bfff16ed7c8031e9c680657df732c54b89d344f82bd54"),
    (NEVER, "7", "c844db8b037a23c0e416601d7d00bf31b269e35cf14f38f04da123f9d7f58b49"),
    (YEARLY, "7", "ab86ae946370cfcbd1a70e746e44db0eb48aad9d382fdbe98c0e8338eefb58bd"),
    (NEVER, "14", "38ce340ba986cec4d6a148b20ef50adb0ed0006891ce5ca7cad87fe665e4cdac"),
    (YEARLY, "14", "af1aefc6aae300519ad4d2f94a14d66313d1b4b6c88d5e08598ca88ffbf5ac6f"),
    (NEVER, "19", "7618ce15472f240cacdcfc64fed128434d273215cb4340076f52d1d8100db322"),
    # the detail rebuilt by the statement (a period refused): json_build_object's spacing
    (NEVER, "22", "caf3f4de3907d708db58a63838c6d17c2fb8ab6db4741e4e73c7f3df9c89e835"),
    (YEARLY, "22", "fc8263bd8a51acb35c19fc899f403d7eea36bb4ab27e023c495dc02e1e50dba8"),
    (YEARLY, "26", "0e1007ecf7868fa5aa0b96ae501e39a8fbf3873e40121786cb0a086ae2fab0ff"),
    (NEVER, "26", "f42eef7520a1b8f296ee9b7bcc91eb700f721af446e1a9f6a521ba06d5b8667f"),
]


@pytest.fixture
async def frozen(fresh_database: str) -> AsyncIterator[PostgresStore]:
    """A store on a database of its own whose `now()` is NOW: an audit row hashes its commit
    time, which would differ on every run."""
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA frozen")
        conn.execute(
            "CREATE FUNCTION frozen.now() RETURNS timestamptz LANGUAGE sql STABLE"
            f" AS $$ SELECT '{NOW.isoformat()}'::timestamptz $$"
        )
        name = conn.execute("SELECT current_database()").fetchone()
        assert name is not None
        conn.execute(f'ALTER DATABASE "{name[0]}" SET search_path = frozen, pg_catalog, public')
    store = PostgresStore(fresh_database)
    await store.open()
    for counter in COUNTERS.values():
        await store.create(counter)
    yield store
    await store.close()


class Frames:
    """Frames applied one after another on one shard, each entry at the next sequence."""

    def __init__(self, store: PostgresStore, lease: Lease) -> None:
        self.store, self.lease, self.sequence = store, lease, 0
        self.recent: dict[str, Span] = {}

    async def apply(
        self,
        records: Sequence[Demand],
        floors: dict[tuple[str, str], int] | None = None,
    ) -> None:
        entries = []
        for record in records:
            self.sequence += 1
            entries.append(Entry("0", str(self.sequence), record, key=record.key))
        basis = Basis(
            COUNTERS,
            self.lease,
            NOW,
            NOW.timestamp(),
            retention=3600.0,
            keep=KEEP_S,
            recent=dict(self.recent),
            floors=floors or {},
        )
        out = await apply(entries, self.store, basis)
        self.recent.update(out.taken)


async def test_the_frames_write_the_chains_they_always_wrote(frozen: PostgresStore) -> None:
    lease = await frozen.acquire("s", "0", "batcher-1", ttl=60)
    assert lease is not None
    frames = Frames(frozen, lease)
    a, b = "edge1-", "edge2-"
    # plain frames: runs by who and edge, a front frame's record, two classes, two periods
    await frames.apply(
        [
            Record(a + "1", "inv", who="key:a"),
            Record(a + "2", "inv", 2, who="key:a"),
            Record(b + "3", "inv", who="key:a"),
            Record(a + "4", "rec", 5, who=[[2, "key:b"], [3, "key:c"]]),
            Record(a + "5", "ack", 3, who="10.0.0.1"),
        ]
    )
    await frames.apply([Record(a + "6", "inv", 4, who="key:b"), Record(a + "7", "rec")])
    # a frame with Idempotency-Keys, a retry of one, a void, a confirmation, a cancel
    await frames.apply(
        [
            Record(a + "8", "inv", 2, idempotency_key="k1", who="key:a"),
            Record(b + "9", "inv", 2, idempotency_key="k1", who="key:a"),
            Record(a + "10", "rec", 1, idempotency_key="k2", who="key:b"),
            Void(a + "11", "inv", 2, 3, "typo", who="key:a"),
            Confirm(a + "12", "ack", 1, 2, who="10.0.0.1"),
            Cancel(a + "6", "inv", who="key:b"),
            Confirm(a + "13", "inv", 1, 1, who="key:a"),  # not confirmable: no row
        ]
    )
    # a retry of a key answered in an earlier frame, and its cancel
    await frames.apply(
        [
            Record(b + "14", "inv", 2, idempotency_key="k1", who="key:a"),
            Cancel(a + "8", "inv", idempotency_key="k1", who="key:a"),
            Cancel(b + "9", "inv", idempotency_key="k1", who="key:a"),
            Cancel(b + "14", "inv", idempotency_key="k1", who="key:a"),
            Record(a + "15", "ack", who="10.0.0.1"),
        ]
    )
    # a refused period beside one that allocates, in the same class: plain, then not
    high = {("ack", ""): 10_000}
    await frames.apply(
        [Record(a + "16", "ack"), Record(a + "17", "inv", who="key:c"), Record(a + "21", "rec")],
        high,
    )
    await frames.apply(
        [
            Record(a + "18", "ack", idempotency_key="k3"),
            Record(a + "22", "rec", idempotency_key="k5"),
            Record(a + "19", "inv", idempotency_key="k4"),
            Void(a + "20", "inv", 1, 1, "typo", day=date(2026, 3, 14)),
        ],
        high,
    )
    async with frozen.db.connection() as conn:
        cur = await conn.execute(
            "SELECT chain, sequence, encode(hash, 'hex'), committed_at FROM allocation_frames"
            " ORDER BY id"
        )
        found = await cur.fetchall()
    assert {at for *_, at in found} == {NOW}  # the clock was stopped
    assert [tuple(row[:3]) for row in found] == EXPECTED
