"""What the Kinesis adapter promises beyond the Stream contract: batched puts within AWS's limits,
partial failures put again without doubles, throttling retried and counted, expired iterators
renewed, and a resharded stream read parents first."""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.adapters import beats
from infra.adapters.aws import AwsCaller
from infra.adapters.kinesis import PUT_GUARD_S, KinesisStream
from infra.errors import ShardEnded
from infra.observe.metrics import Metrics
from infra.settings import Settings
from infra.wire import Cancel, Record
from tests.aws import resources
from tests.streams import read_all


class Flaky:
    """The real client, with faults injected into chosen calls the first `times` times."""

    def __init__(self, client: Any, faults: dict[str, int]) -> None:
        self.client, self.faults = client, dict(faults)

    def _fault(self, name: str) -> bool:
        if self.faults.get(name, 0) > 0:
            self.faults[name] -= 1
            return True
        return False

    def put_records(self, **kwargs: Any) -> dict[str, Any]:
        if not self._fault("put_records"):
            return dict(self.client.put_records(**kwargs))
        # AWS's partial failure: every other record is refused, the rest are put.
        records = kwargs["Records"]
        out = self.client.put_records(**{**kwargs, "Records": records[::2]})
        results, taken = [], iter(out["Records"])
        for n in range(len(records)):
            results.append(
                next(taken)
                if n % 2 == 0
                else {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "x"}
            )
        return {"FailedRecordCount": len(records) // 2, "Records": results}

    def get_records(self, **kwargs: Any) -> dict[str, Any]:
        if self._fault("throttle"):
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}},
                "GetRecords",
            )
        if self._fault("expire"):
            raise ClientError(
                {"Error": {"Code": "ExpiredIteratorException", "Message": "old"}}, "GetRecords"
            )
        return dict(self.client.get_records(**kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def stream(settings: Settings, client: Any, metrics: Metrics) -> KinesisStream:
    return KinesisStream(client, AwsCaller(4, metrics), settings.aws.stream_name, metrics, 1, 0.02)


async def test_many_puts_go_out_in_few_calls_and_partial_failures_are_put_once(
    aws: tuple[Settings, Any],
) -> None:
    settings, found = aws
    metrics = Metrics()
    kinesis = stream(settings, Flaky(found.kinesis, {"put_records": 1}), metrics)
    records = [Record(f"k{i}", "inv") for i in range(700)]
    await asyncio.gather(*(kinesis.put([r]) for r in records))
    calls = metrics.aws_calls.values
    assert calls["put_records"] <= 5, calls  # 700 puts, at most 500 records a call
    assert metrics.aws_retries.values["throttled"] > 0
    (shard,) = await kinesis.shards()
    entries = await read_all(kinesis, expect=700, shard=shard)
    keys = [e.record.key for e in entries]
    assert sorted(keys) == sorted(r.key for r in records)  # each exactly once


async def test_throttled_and_expired_reads_are_retried(aws: tuple[Settings, Any]) -> None:
    settings, found = aws
    metrics = Metrics()
    kinesis = stream(settings, Flaky(found.kinesis, {"throttle": 2, "expire": 1}), metrics)
    await kinesis.put([Record("a", "inv"), Record("b", "inv")])
    (shard,) = await kinesis.shards()
    entries = await read_all(kinesis, expect=2, shard=shard)
    assert [e.record.key for e in entries] == ["a", "b"]
    assert metrics.aws_retries.values["throttled"] == 2
    assert metrics.aws_calls.values["get_shard_iterator"] == 2  # made again once it expired


class Resharded:
    """A client answering as AWS does after a split: the parent is closed (GetRecords gives no
    NextShardIterator once it is read to its end) and the children name it as their parent.
    moto cannot stand in here: its SplitShard moves the parent's records into the children."""

    def __init__(self) -> None:
        self.reads = 0

    def describe_stream_summary(self, **kwargs: Any) -> dict[str, Any]:
        created = datetime(2026, 11, 30, tzinfo=UTC)
        return {"StreamDescriptionSummary": {"StreamCreationTimestamp": created}}

    def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        return {
            "Shards": [
                {"ShardId": "shard-0"},
                {"ShardId": "shard-1", "ParentShardId": "shard-0"},
                {"ShardId": "shard-2", "ParentShardId": "shard-0"},
            ]
        }

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        return {"ShardIterator": f"it-{kwargs['ShardId']}"}

    def get_records(self, **kwargs: Any) -> dict[str, Any]:
        self.reads += 1
        if self.reads == 1:
            data = b'{"v":1,"k":"a","c":"inv","n":1,"d":0,"s":0}'
            records = [{"SequenceNumber": "1", "Data": data}]
            return {"Records": records, "NextShardIterator": "it-2", "MillisBehindLatest": 1500}
        return {"Records": [], "MillisBehindLatest": 0}  # closed, and read to its end


async def test_a_closed_shard_ends_and_its_children_name_their_parent() -> None:
    metrics = Metrics()
    kinesis = KinesisStream(Resharded(), AwsCaller(2, metrics), "s", metrics, 1, 0.0)
    shards = await kinesis.shards()
    assert shards == {"shard-0": (), "shard-1": ("shard-0",), "shard-2": ("shard-0",)}
    assert kinesis.name == "s@1795996800"  # the stream's name and creation time, for its leases
    entries = await kinesis.read("shard-0", None, 100, 0)
    assert [e.record.key for e in entries] == ["a"]
    assert kinesis.lag("shard-0") == 1.5
    with pytest.raises(ShardEnded):
        await kinesis.read("shard-0", "1", 100, 0)


class Timed:
    """The real client, noting when (Unix time) each GetRecords is made."""

    def __init__(self, client: Any) -> None:
        self.client, self.reads = client, list[float]()

    def get_records(self, **kwargs: Any) -> dict[str, Any]:
        self.reads.append(time.time())
        return dict(self.client.get_records(**kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


@pytest.mark.slow  # 3-5 s: the fast lane's budget (docs/testing.md)
async def test_a_batcher_reads_its_shard_on_the_beats_and_never_more_than_once_a_beat(
    aws: tuple[Settings, Any],
) -> None:
    """So that an edge knows when its record is read (infra/adapters/beats.py): counted over
    30 beats of 100 ms, a read a beat at most (AWS allows five a second at 200 ms), and most of
    them in the first quarter of their beat (a read whose time passed reads at once, so not
    all), where reads timed from the last one fell anywhere in it."""
    settings, found = aws
    client = Timed(found.kinesis)
    kinesis = KinesisStream(client, AwsCaller(4, Metrics()), settings.aws.stream_name, Metrics())
    kinesis.read_interval = 0.1
    (shard,) = await kinesis.shards()
    began = time.time()
    while time.time() < began + 3.0:
        await kinesis.read(shard, None, 100, 0.1)
    spanned = (time.time() - began) / 0.1 + 1
    assert len(client.reads) <= spanned, (len(client.reads), spanned)
    early = [t for t in client.reads if t - beats.beat(t - 0.1, 0.1) < 0.025]
    assert len(early) >= 0.8 * len(client.reads), sorted(t % 0.1 for t in client.reads)


async def test_phased_a_lone_record_lands_on_the_shard_read_next_and_its_cancel_follows(
    aws: tuple[Settings, Any],
) -> None:
    """READ_BEATS=phased on four shards, READ_INTERVAL_MS 200: each lone record without an
    Idempotency-Key goes to the shard read first after its put is expected to return (the put's
    mean time and twice its deviation, `put_times`), so it waits that margin and half a gap between
    phases for its read (25 ms here) where shared beats make it wait half the interval (100 ms);
    `phase` says where it landed, its Cancel goes to the same shard, after it,
    and a keyed record keeps its partition (its retries meet on one shard)."""
    settings, _ = aws
    with resources(settings, shards=4) as (own, found):
        metrics = Metrics()
        kinesis = KinesisStream(
            found.kinesis, AwsCaller(4, metrics), own.aws.stream_name, metrics, 1, 0.2, phased=True
        )
        phases = {
            s: beats.phase_of(int(d["HashKeyRange"]["StartingHashKey"]), 0.2)
            for s, d in ((d["ShardId"], d) for d in await kinesis._list())
        }
        await kinesis.put([Record("first", "inv")])  # its put lists the shards first
        waits, firsts = [], 0
        for n in range(30):
            record = Record(f"r{n}", "inv")
            expected = time.time() + kinesis.put_times.likely() + PUT_GUARD_S
            await kinesis.put([record])
            returned = time.time()
            phase = kinesis.phase(record.key)
            firsts += beats.beat(expected, 0.2, phase) - expected < 0.05 + 0.001
            waits.append(beats.beat(returned, 0.2, phase) - returned)
            await kinesis.put([Cancel(record.key, "inv")])
            await asyncio.sleep(0.013 * (n % 7))  # puts at every phase of the interval
        keyed = [Record(f"k{n}", "inv", idempotency_key="same") for n in range(3)]
        for record in keyed:
            await kinesis.put([record])
        where: dict[str, list[tuple[str, str]]] = {}  # key: (shard, kind) in shard order
        for shard in await kinesis.shards():
            for entry in await kinesis.read(shard, None, 1000, 0.5):
                where.setdefault(entry.record.key, []).append((shard, type(entry.record).__name__))
        for n in range(30):
            (shard, kind), (again, then) = where[f"r{n}"]
            assert (kind, then) == ("Record", "Cancel") and again == shard, where[f"r{n}"]
            assert kinesis.phase(f"r{n}") == pytest.approx(phases[shard])
        assert len({where[r.key][0][0] for r in keyed}) == 1  # one shard for one key
        # on the shard read first after the put's expected return (the next phase is 50 ms on)
        assert firsts == 30, firsts
        waits.sort()
        print(
            f"waits for the read, ms: {[round(w * 1000) for w in waits]}", vars(kinesis.put_times)
        )


async def test_a_batchers_cancels_go_on_the_shard_it_read_their_records_from(
    aws: tuple[Settings, Any],
) -> None:
    """A batcher cancels the records it gives up on the shard it read them from
    (`Applier._cancel`, `put(..., shard)`), behind them, whatever shard their partition key maps
    to: on phased beats an edge puts a lone record on the shard read next, not its counter's,
    and a cancel put by the counter's key would land on another shard, ahead of nothing — a
    batcher that took the record's shard over as Postgres came back would replay the record and
    allocate it for a client answered 503 (the fault matrix's server-1w-postgres cell found such
    a value, issued to no one, 2026-12-05)."""
    settings, _ = aws
    with resources(settings, shards=4) as (own, found):
        metrics = Metrics()
        edge, batcher = (
            KinesisStream(
                found.kinesis, AwsCaller(4, metrics), own.aws.stream_name, metrics, 1, 0.2, phased
            )
            for phased in (True, False)
        )
        shards = await batcher.shards()
        await edge.put([Record("probe", "inv")])  # lists the shards
        for n in range(12):  # lone records, on the shard read next: over every shard
            await edge.put([Record(f"r{n}", "inv")])
            await asyncio.sleep(0.05)
        read: dict[str, str] = {}
        for shard in shards:
            for entry in await batcher.read(shard, None, 1000, 0.5):
                read[entry.record.key] = shard
        for key, shard in read.items():
            await batcher.put([Cancel(key, "inv")], shard)
        where: dict[str, list[tuple[str, str]]] = {}
        for shard in shards:
            for entry in await batcher.read(shard, None, 1000, 0.5):
                where.setdefault(entry.record.key, []).append((shard, type(entry.record).__name__))
        by_key = KinesisStream(
            found.kinesis, AwsCaller(4, metrics), own.aws.stream_name, metrics, 1, 0.2, False
        )
        await by_key.put([Cancel("by-key", "inv")])
        (counters_shard,) = {
            s
            for s in shards
            for e in await by_key.read(s, None, 1000, 0.5)
            if e.record.key == "by-key"
        }
    assert sum(shard != counters_shard for shard in read.values()) >= 2, read
    for key, shard in read.items():
        assert where[key] == [(shard, "Record"), (shard, "Cancel")], where[key]


async def test_phased_a_front_frames_records_go_together_to_the_shard_read_next(
    aws: tuple[Settings, Any],
) -> None:
    """READ_BEATS=phased: a put of several records (a server edge's front frame, one a counter)
    sends every one without an Idempotency-Key to the one shard read first after the put returns,
    a keyed one by its partition key; `before_beat` is the time left to the last moment such a
    put may begin and return before that shard's read (at most a gap between phases away, or
    past the time it is told to wait)."""
    settings, _ = aws
    with resources(settings, shards=4) as (own, found):
        metrics = Metrics()
        kinesis = KinesisStream(
            found.kinesis, AwsCaller(4, metrics), own.aws.stream_name, metrics, 1, 0.2, phased=True
        )
        assert kinesis.before_beat(0.01) is None  # not listed yet: a fixed frame
        await kinesis.put([Record("first", "inv")])  # its put lists the shards
        for n in range(12):
            left = kinesis.before_beat(0.01)
            assert left is not None and 0 <= left <= 0.05 + 1e-6, left
            later = kinesis.before_beat(0.01, 0.12)  # not closing for 120 ms: a read after that
            assert later is not None and 0.12 - 1e-6 <= later <= 0.12 + 0.05 + 1e-6, later
            frame = [Record(f"a{n}", "inv"), Record(f"b{n}", "po"), Record(f"c{n}", "rx")]
            expected = time.time() + kinesis.put_times.likely() + PUT_GUARD_S
            await kinesis.put([*frame, Record(f"k{n}", "inv", idempotency_key="same")])
            landed = {kinesis.placement.placed[r.key] for r in frame}
            assert len(landed) == 1, landed  # one shard for the frame
            aim, phase = landed.pop()
            assert aim is not None and beats.beat(expected, 0.2, phase) - expected <= 0.05 + 1e-3
            assert kinesis.placement.placed[f"k{n}"][0] is None  # by its partition key
            await asyncio.sleep(0.017 * (n % 5))


async def test_phased_a_batcher_reads_each_shard_on_beats_of_its_own_phase(
    aws: tuple[Settings, Any],
) -> None:
    """READ_BEATS=phased, four shards read at 100 ms: each shard's reads fall on its own phase
    (0, 25, 50 and 75 ms into the interval), as its edges expect; with shared beats all four
    fell in the first 25 ms."""
    settings, _ = aws
    with resources(settings, shards=4) as (own, found):
        reads: dict[str, list[float]] = {}

        class Noted(Timed):
            """Notes each shard's reads, by the shard its iterator was made for."""

            def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
                out = dict(self.client.get_shard_iterator(**kwargs))
                shard_of[out["ShardIterator"]] = kwargs["ShardId"]
                return out

            def get_records(self, **kwargs: Any) -> dict[str, Any]:
                shard = shard_of[kwargs["ShardIterator"]]
                reads.setdefault(shard, []).append(time.time())
                out = dict(self.client.get_records(**kwargs))
                shard_of[out["NextShardIterator"]] = shard
                return out

        shard_of: dict[str, str] = {}
        metrics = Metrics()
        kinesis = KinesisStream(
            Noted(found.kinesis),
            AwsCaller(8, metrics),
            own.aws.stream_name,
            metrics,
            1,
            0.1,
            phased=True,
        )
        shards = list(await kinesis.shards())

        async def loop(shard: str) -> None:
            began = time.time()
            while time.time() < began + 2.0:
                await kinesis.read(shard, None, 100, 0.1)

        await asyncio.gather(*(loop(s) for s in shards))
        print({s: sorted(round(t % 0.1 * 1000) for t in ts) for s, ts in reads.items()})
        # Most reads on time: the median read within 25 ms of its shard's phase. On shared beats
        # a shard of phase 50 ms was read 50-75 ms after its phase; on a machine losing half its
        # CPU to steal a quarter of the reads came late (12 of 16 on time in a CI run).
        for shard in shards:
            phase = kinesis._read_phases[shard]
            times = reads[shard]
            assert statistics.median((t - phase) % 0.1 for t in times) < 0.025, (shard, times)


async def test_phased_a_stream_it_may_not_list_is_put_to_by_partition_key_listed_once_a_while(
    aws: tuple[Settings, Any],
) -> None:
    """A Lambda edge without kinesis:ListShards (an old template's role): its puts go by
    partition key as on shared beats, and it does not try to list at every put."""
    settings, found = aws

    class Denied:
        def __init__(self, client: Any) -> None:
            self.client, self.listed = client, 0

        def list_shards(self, **kwargs: Any) -> dict[str, Any]:
            self.listed += 1
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "x")

        def __getattr__(self, name: str) -> Any:
            return getattr(self.client, name)

    client = Denied(found.kinesis)
    metrics = Metrics()
    kinesis = KinesisStream(
        client, AwsCaller(2, metrics), settings.aws.stream_name, metrics, 1, 0.2, phased=True
    )
    for n in range(3):
        await kinesis.put([Record(f"d{n}", "inv")])
    assert client.listed == 1
    shard = found.kinesis.list_shards(StreamName=settings.aws.stream_name)["Shards"][0]["ShardId"]
    assert [e.record.key for e in await kinesis.read(shard, None, 100, 0.5)] == ["d0", "d1", "d2"]
    assert kinesis.phase("d0") == 0.0  # the one shard's phase: its range starts at 0
