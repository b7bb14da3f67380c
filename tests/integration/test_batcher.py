"""The batcher on a real Postgres: poison records, dead letters, expiry, leases, checkpoints."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace

import psycopg
import pytest

from batcher.worker import Batcher
from infra.adapters.memory import MemoryReplies
from infra.adapters.postgres import PostgresStore
from infra.counters import Counter
from infra.errors import LeaseLost, ShardEnded, Unavailable
from infra.observe.metrics import Metrics
from infra.ports import Audit, Entry, PlainDemand
from infra.settings import Settings
from infra.spans import Span
from infra.wire import Record, Reply, ReplyError
from tests.checks import until
from tests.streams import ListStream

CLASS = "3600s-never"


class Collect(MemoryReplies):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Reply] = []

    async def publish(self, replies: Sequence[Reply]) -> None:
        self.seen.extend(replies)


async def run_until(batcher: Batcher, replies: Collect, count: int) -> None:
    await batcher.start()
    for _ in range(500):
        if len(replies.seen) >= count:
            break
        await asyncio.sleep(0.01)
    await batcher.stop()


def raw(key: str, counter: str, count: int = 1, deadline: float | None = None) -> bytes:
    import orjson

    return orjson.dumps(
        {
            "k": key,
            "c": counter,
            "n": count,
            "d": time.time() + 30 if deadline is None else deadline,
        }
    )


async def test_poison_records_are_dead_lettered_and_the_shard_moves_on(
    store: PostgresStore, settings: Settings, name: str, database_url: str
) -> None:
    await store.create(Counter(name))
    stream = ListStream(
        [
            raw("a", name),
            b"{not json",
            b'{"k": "b", "c": "x", "n": 0, "d": 1}',
            raw("c", name + "-missing"),
            raw("d", name, 2),
        ]
    )
    replies = Collect()
    batcher = Batcher(stream, replies, store, settings, Metrics())
    await run_until(batcher, replies, 4)
    by_key = {r.key: r for r in replies.seen}
    assert (by_key["a"].first, by_key["d"].first, by_key["d"].last) == (1, 2, 3)
    assert by_key["b"].error is ReplyError.BAD_RECORD
    assert by_key["c"].error is ReplyError.COUNTER_NOT_FOUND
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT sequence, problem FROM dead_letters WHERE stream = %s ORDER BY id",
            (stream.name,),
        )
        letters = await cur.fetchall()
        cur = await conn.execute("SELECT sequence FROM leases WHERE stream = %s", (stream.name,))
        (checkpoint,) = await cur.fetchone()  # type: ignore[misc]
    assert [seq for seq, _ in letters] == ["2", "3", "4"]
    assert "not JSON" in letters[0][1]
    assert checkpoint == "5"
    assert batcher.metrics.dead_letters.value == 3


async def test_a_replay_after_the_checkpoint_allocates_nothing_twice(
    store: PostgresStore, settings: Settings, name: str
) -> None:
    await store.create(Counter(name))
    stream = ListStream([raw(f"r{i}", name) for i in range(10)])
    first = Collect()
    owner = "batcher-a"
    await run_until(Batcher(stream, first, store, settings, Metrics(), owner=owner), first, 10)
    # The same owner starts again (a restart): it resumes after its checkpoint.
    stream.append(raw("r10", name))
    again = Collect()
    await run_until(Batcher(stream, again, store, settings, Metrics(), owner=owner), again, 1)
    assert [r.key for r in again.seen] == ["r10"]
    assert again.seen[0].first == 11
    assert await store.allocated(name, "") == 11


async def test_expired_records_allocate_nothing(
    store: PostgresStore, settings: Settings, name: str
) -> None:
    await store.create(Counter(name))
    stream = ListStream([raw("late", name, deadline=time.time() - 1), raw("fresh", name)])
    replies = Collect()
    await run_until(Batcher(stream, replies, store, settings, Metrics()), replies, 2)
    by_key = {r.key: r for r in replies.seen}
    assert by_key["late"].error is ReplyError.EXPIRED
    assert by_key["fresh"].first == 1
    assert await store.allocated(name, "") == 1


async def test_lease_is_exclusive_and_fences_an_old_owner(store: PostgresStore, name: str) -> None:
    stream = f"lease-{name}"
    mine = await store.acquire(stream, "s", "a", ttl=30)
    assert mine is not None and mine.epoch == 1
    assert await store.acquire(stream, "s", "b", ttl=30) is None  # held
    assert (await store.acquire(stream, "s", "a", ttl=30)).epoch == 1  # type: ignore[union-attr]
    await store.release(mine, forget=False)  # expires now
    theirs = await store.acquire(stream, "s", "b", ttl=30)
    assert theirs is not None and theirs.epoch == 2
    with pytest.raises(LeaseLost):
        async with store.frame() as tx:
            await tx.checkpoint(mine, "9", [])
    async with store.frame() as tx:
        await tx.checkpoint(theirs, "9", [])


def audit(*ranges: Span, keep: float = 3600.0) -> Audit:
    """One audit row of the class 'never reset, kept `keep` seconds', with these ranges."""
    return Audit(f"{keep:g}s-never", keep, {"r": [], "v": []}, list(ranges))


async def test_a_frame_that_loses_its_lease_rolls_back(store: PostgresStore, name: str) -> None:
    await store.create(Counter(name))
    stream = f"lease-{name}"
    stale = await store.acquire(stream, "s", "a", ttl=30)
    assert stale is not None
    await store.release(stale, forget=False)
    assert await store.acquire(stream, "s", "b", ttl=30) is not None
    with pytest.raises(LeaseLost):
        async with store.frame() as tx:
            await tx.allocate({(name, ""): 5}, {})
            await tx.checkpoint(stale, "1", [audit((name, "", 1, 5))])
    assert await store.allocated(name, "") == 0  # nothing allocated by the fenced-out owner


async def test_a_plain_frame_is_fenced_and_audited_in_one_statement(
    store: PostgresStore, name: str, database_url: str
) -> None:
    """allocate_plain: a fenced-out owner allocates nothing and records nothing; the owner's
    frame moves the checkpoint and leaves one audit row whose ranges hold exactly its values."""
    other = f"{name}-b"
    await store.create(Counter(name, start=100))
    await store.create(Counter(other))
    stream = f"plain-{name}"
    stale = await store.acquire(stream, "s", "a", ttl=30)
    assert stale is not None
    await store.release(stale, forget=False)
    owner = await store.acquire(stream, "s", "b", ttl=30)
    assert owner is not None
    with pytest.raises(LeaseLost):
        await store.allocate_plain(stale, "1", [PlainDemand(name, "", 5, 100, CLASS, 0)], [audit()])
    assert await store.allocated(name, "") == 0

    first = await store.allocate_plain(
        owner,
        "1",
        [PlainDemand(name, "", 5, 100, CLASS, 0), PlainDemand(other, "", 2, 1, CLASS, 0)],
        [audit()],
    )
    second = await store.allocate_plain(
        owner, "2", [PlainDemand(name, "", 3, 100, CLASS, 0)], [audit()]
    )
    assert first == {(name, ""): 5, (other, ""): 2} and second == {(name, ""): 8}
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT sequence, counter, first, last FROM allocations WHERE stream = %s"
            " ORDER BY frame, counter",
            (stream,),
        )
        trail = await cur.fetchall()
        cur = await conn.execute(
            "SELECT sequence FROM leases WHERE stream = %s AND shard = 's'", (stream,)
        )
        (checkpoint,) = await cur.fetchone()  # type: ignore[misc]
    assert trail == [("1", name, 100, 104), ("1", other, 1, 2), ("2", name, 105, 107)]
    assert checkpoint == "2"


async def test_settings_fixture_is_fast(settings: Settings) -> None:
    assert settings.frames.back_frame_ms < 10


async def test_prune_drops_expired_keys_and_old_audit_rows(
    store: PostgresStore, name: str, database_url: str
) -> None:
    from datetime import UTC, datetime, timedelta

    from infra.ports import Claim, DeadLetter, Lease

    await store.create(Counter(name))
    lease = await store.acquire(f"prune-{name}", "s", "me", ttl=30)
    assert isinstance(lease, Lease)
    async with store.frame() as tx:
        await tx.allocate({(name, ""): 3}, {})
        await tx.remember([Claim(name, "k", 3, 1, 3, datetime.now(UTC).date())], retention=60)
        await tx.dead_letter([DeadLetter(lease.stream, "s", "1", "bad", b"x")])
        await tx.checkpoint(lease, "1", [audit((name, "", 1, 3))])

    async def rows() -> tuple[int, int, int]:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            counts = []
            for sql in (
                "SELECT count(*) FROM idempotency_keys WHERE counter = %s",
                "SELECT count(*) FROM allocations WHERE counter = %s",
                "SELECT count(*) FROM dead_letters WHERE stream = 'prune-' || %s",
            ):
                cur = await conn.execute(sql, (name,))
                counts.append((await cur.fetchone())[0])  # type: ignore[index]
            return counts[0], counts[1], counts[2]

    assert await rows() == (1, 1, 1)
    await store.prune(
        datetime.now(UTC), audit_retention=3600, reply_retention=3600
    )  # nothing is old enough
    assert await rows() == (1, 1, 1)
    later = datetime.now(UTC) + timedelta(hours=2)
    assert await store.prune(later, audit_retention=3600, reply_retention=3600) >= 3
    assert await rows() == (0, 0, 0)


class Resharded:
    """Two durable shards, the second the child of the first: the parent holds records and then
    ends, as a closed Kinesis shard does; the child holds later records."""

    durable = True
    reads = None

    def __init__(self, parent: ListStream, child: ListStream) -> None:
        self.name = parent.name
        self.lists = {"parent": parent, "child": child}

    async def put(self, records: Sequence[Record], shard: str | None = None) -> None:
        raise NotImplementedError

    async def shards(self) -> dict[str, tuple[str, ...]]:
        return {"child": ("parent",), "parent": ()}  # the child first: order must not matter

    async def read(self, shard: str, after: str | None, limit: int, wait: float) -> list[Entry]:
        found = await self.lists[shard].read("shard-0", after, limit, wait)
        if shard == "parent" and not found and after == str(len(self.lists["parent"].entries)):
            raise ShardEnded("parent is closed and read to its end")
        return [replace(e, shard=shard) for e in found]

    def lag(self, shard: str) -> float | None:
        return None


async def test_a_child_shard_is_read_only_after_its_parent_ended(
    store: PostgresStore, settings: Settings, name: str
) -> None:
    await store.create(Counter(name))
    parent = ListStream([raw(f"p{i}", name) for i in range(5)])
    child = ListStream([raw(f"c{i}", name) for i in range(5)])
    replies = Collect()
    await run_until(
        Batcher(Resharded(parent, child), replies, store, settings, Metrics()), replies, 10
    )
    values = {r.key: r.first for r in replies.seen}
    assert max(values[f"p{i}"] for i in range(5)) < min(values[f"c{i}"] for i in range(5))
    assert await store.ended(parent.name, "parent")


class Flaky(ListStream):
    """A stream that cannot be read for its first `failures` reads."""

    def __init__(self, raws: Sequence[bytes], failures: int) -> None:
        super().__init__(raws)
        self.failures = failures

    async def read(self, shard: str, after: str | None, limit: int, wait: float) -> list[Entry]:
        if self.failures:
            self.failures -= 1
            raise Unavailable("the stream is away")
        return await super().read(shard, after, limit, wait)


async def test_health_comes_back_when_the_stream_does(
    store: PostgresStore, settings: Settings, name: str
) -> None:
    await store.create(Counter(name))
    stream = Flaky([], failures=1)
    batcher = Batcher(stream, Collect(), store, settings, Metrics())
    await batcher.start()
    try:
        for _ in range(100):
            if not batcher.healthy:
                break
            await asyncio.sleep(0.01)
        assert batcher.trouble == ["read shard-0"]
        for _ in range(300):  # the next read works: healthy again, with no frame needed
            if batcher.healthy:
                break
            await asyncio.sleep(0.01)
        assert batcher.healthy
    finally:
        await batcher.stop()


async def test_a_shard_loop_that_dies_of_a_bug_is_started_again_from_its_checkpoint(
    store: PostgresStore,
    settings: Settings,
    name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await store.create(Counter(name))
    stream = ListStream([raw("a", name), raw("b", name)])
    real, calls = store.get_many, []

    async def buggy(names: Sequence[str]) -> dict[str, Counter]:
        calls.append(names)
        if len(calls) == 1:
            raise RuntimeError("a bug that one frame trips")
        return await real(names)

    monkeypatch.setattr(store, "get_many", buggy)
    replies, metrics = Collect(), Metrics()
    batcher = Batcher(stream, replies, store, settings, metrics)
    await batcher.start()
    await until(lambda: metrics.shard_restarts.value > 0, within=5)
    # it died on its first frame: said, counted and shown, before anything was answered
    assert metrics.shard_restarts.value == 1
    assert batcher.trouble == ["dead shard-shard-0"] and not replies.seen
    assert "a bug that one frame trips" in caplog.text  # the traceback, for whoever fixes it
    # started again from the checkpoint: both records answered, each once
    await until(lambda: len(replies.seen) >= 2, within=5)
    await batcher.stop()
    assert sorted((r.key, r.first) for r in replies.seen) == [("a", 1), ("b", 2)]
    assert batcher.healthy and metrics.shard_restarts.value == 1
    assert await store.allocated(name, "") == 2


async def test_a_loop_that_dies_while_stopping_is_not_started_again(
    store: PostgresStore, settings: Settings, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.create(Counter(name))
    stream = ListStream()
    batcher = Batcher(stream, Collect(), store, settings, Metrics())
    await batcher.start()

    async def broken(names: Sequence[str]) -> dict[str, Counter]:
        raise RuntimeError("a bug met on the way out")

    monkeypatch.setattr(store, "get_many", broken)
    stream.append(raw("a", name))
    stopping = asyncio.create_task(batcher.stop())  # drains what is on the stream, and dies
    await asyncio.wait_for(stopping, 5)
    await asyncio.sleep(1.2)  # longer than the first restart's backoff
    assert batcher.trouble == ["dead shard-shard-0"]
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("shard-")]
