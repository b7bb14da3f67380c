"""The Stream port on Amazon Kinesis Data Streams (boto3, through `AwsCaller`).

Putting: concurrent puts of one process are gathered into PutRecords calls (at most 500 records
and 5 MiB a call; PutRecord for a lone record): while one call is out, the next batch collects.
Records a partial failure left out are put again with backoff; the others are never put twice.
A counter's records go under the counter's partition key; PARTITION_SPREAD > 1 spreads a hot
counter over that many keys (so over up to that many shards), keeping every Idempotency-Key on
one of them so that its retries meet in one shard's frames.

Reading: one iterator per shard, made from the checkpoint (AFTER_SEQUENCE_NUMBER, or TRIM_HORIZON
for a shard never read) and renewed when it expires; a shard is read on the beats of
READ_INTERVAL_MS, the Unix times that are multiples of it, so that edges know when to read their
replies (infra/adapters/beats.py), and its reads begin at least the interval apart (AWS allows
five a second per shard, shared by every consumer); a closed shard raises ShardEnded once read to
its end; MillisBehindLatest is the lag, and a shard behind is read as soon as the interval allows.

With phased beats (READ_BEATS=phased) each shard is read on beats of its own phase, and a record
without an Idempotency-Key (a Lambda container's, or a server edge's front frame's, all of a put
together) is put on the shard read first after its put is expected to return (ExplicitHashKey:
the start of that shard's range), from the open shards listed once and again every
SHARDS_EVERY_S, or when a put lands on a shard not listed. Where each record landed is
kept (`phase`, for its reply's read); a Cancel goes where its record went.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from infra.adapters import beats
from infra.adapters.aws import AwsCaller
from infra.adapters.limits import PUT_RECORDS_MAX, PUT_RECORDS_MAX_BYTES
from infra.backoff import Retries
from infra.errors import AwsRefused, NumeratorError, ShardEnded, StreamFull
from infra.observe.metrics import Metrics
from infra.ports import Entry, Reads
from infra.wire import Cancel, Demand, Record, encode

log = logging.getLogger("numerator.kinesis")

PUT_ATTEMPTS = 6
SHARDS_EVERY_S = 300.0  # phased beats: an edge lists the open shards again this often
PLACED = 50_000  # phased beats: where this many of the latest records landed is kept
AVOID_S = 10.0
"""Phased beats: how long puts go to the other shards once a record's reply is overdue
(`Placement.slow`: its shard's batcher frozen, or dead and its lease not yet expired); then one
put goes there, a probe, and the others keep away until a reply from it comes (`heard`) or it is
overdue too (another AVOID_S) or AVOID_S passes with neither (another probe). Only when another
shard has lately answered in time a record put after the overdue one, and its own shard has
answered nothing in time since (`_slower`): when none has (every shard stalls at once — a
loaded machine, a slow Postgres, every batcher paused — or no reply came yet: a container's
first request) the shard is no slower than the rest, and passing it over would move its load to
shards no faster. An edge with one request in flight at a time (a Lambda container) has no such
word: a frozen shard costs it a request now and then until the shard's lease expires."""
EVIDENCE_S = 0.5
"""Phased beats: how far back another shard's timely replies count as a word that a shard with an
overdue reply stalls alone (`Placement._slower`)."""
PUT_GUARD_S = 0.002
"""Phased beats: a record is put on a shard read at least this long after its put is expected to
return (the put's mean time and twice its mean deviation: `put_times`)."""
TIMER_S = 0.001
"""How late an event loop's timer may fire: epoll counts in milliseconds, and asyncio rounds a
timeout up. `sleep_until` sleeps this much short and yields until the time has come."""


Row = tuple[bytes, str, str | None, str]
"""A record to put: its data, partition key, explicit hash key (or None) and reply key."""
Waiter = tuple[list[Row], "asyncio.Future[None]"]
"""One put() call: its records, and the future it awaits."""


class Placement:
    """Phased beats: the open shards a put aims at (listed once, and again every SHARDS_EVERY_S
    or when a put lands on a shard not listed), and where each of the latest PLACED records
    landed, by reply key: the hash key it went under (None: its partition key's) and its
    shard's phase."""

    def __init__(self, interval: float, metrics: Metrics | None = None) -> None:
        self.phases = beats.Phases(interval)
        self.listed = -SHARDS_EVERY_S  # monotonic time the open shards were listed
        self.placed: OrderedDict[str, tuple[str | None, float]] = OrderedDict()
        self.avoided: dict[str, float] = {}  # hash key: monotonic time puts may go there again
        self.probing: set[str] = set()  # avoided shards a probe was put on
        self.timely: dict[str, float] = {}  # hash key: monotonic time its last timely reply came
        # hash key: (came, put) of its timely replies within the last EVIDENCE_S, monotonic times
        self.answers: dict[str, deque[tuple[float, float]]] = {}
        self.metrics = metrics or Metrics()

    def choose(self, returns: float, probe: bool = False) -> tuple[str, float]:
        """The hash key and phase of the shard read first after `returns` (Unix time), one not
        avoided (`slow`) unless every one is: a shard whose AVOID_S has passed may be chosen,
        and when it is for a put (`probe`), that put is its probe and the others keep away
        until the probe's reply says (`heard`, `slow`)."""
        avoided = self.avoided
        if not avoided:
            return self.phases.choose(returns)
        now = time.monotonic()
        key, phase = self.phases.choose(returns, {k for k, until in avoided.items() if until > now})
        if probe and key in avoided and avoided[key] <= now:
            avoided[key] = now + AVOID_S
            self.probing.add(key)
        return key, phase

    def chosen(self, returns: float) -> str | None:
        """The hash key of the shard read first after `returns`, when a put begun now is
        expected to return (None before the shards are listed)."""
        if not self.phases:
            return None
        return self.choose(returns, probe=True)[0]

    def heard(self, key: str, timely: bool = True, waited: float = 0.0) -> None:
        """The reply of the record of reply key `key` came, `waited` seconds after its put
        (`timely`: before it was overdue): its shard, if avoided, is read again, and puts go
        there as before."""
        placed = self.placed.get(key)
        if placed is None or placed[0] is None:
            return
        if timely:
            now = time.monotonic()
            self.timely[placed[0]] = now
            kept = self.answers.setdefault(placed[0], deque())
            kept.append((now, now - waited))
            while kept[0][0] < now - EVIDENCE_S:
                kept.popleft()
        if self.avoided:
            self.avoided.pop(placed[0], None)
            self.probing.discard(placed[0])

    def slow(self, key: str, waited: float) -> None:
        """The reply of the record put under reply key `key` has not come in `waited` seconds
        (DynamoReplies' `overdue`): the shard it was aimed at is read by no one now (its
        batcher frozen, or dead with its lease not yet expired), so puts go to the others for
        AVOID_S. A record by its partition key (keyed) stays where its retries meet."""
        placed = self.placed.get(key)
        if placed is None or placed[0] is None:
            return
        aim, now = placed[0], time.monotonic()
        if aim not in self.avoided:  # a shard newly avoided
            if not self._slower(aim, now - waited, now):
                return  # no slower than the others: every shard stalls, or none answered yet
            self.metrics.shards_avoided.inc()
            log.warning(
                "no reply in %.1f s for a record on the shard at hash key %s: putting on the "
                "other shards for %g s (is its batcher frozen, or gone with its lease held?)",
                waited,
                aim,
                AVOID_S,
            )
        elif aim in self.probing:
            # Its probe's: what was put there before it was avoided is overdue within
            # OVERDUE_S of it, long before its probe goes.
            self.probing.discard(aim)
            log.warning(
                "no reply in %.1f s for the probe of the shard at hash key %s either: "
                "passing it over for another %g s",
                waited,
                aim,
                AVOID_S,
            )
        self.avoided[aim] = now + AVOID_S

    def _slower(self, aim: str, since: float, now: float) -> bool:
        """Whether `aim`'s shard stalls alone, not with the rest: it has answered nothing in time
        since `since` (when the overdue record was put), and another shard has — a record put
        after that one, its reply come lately (within EVIDENCE_S) but not within the last beat:
        as every shard stops (all batchers paused) or starts again (their thaw), one shard's
        beat comes before the next's, and for up to a beat one answers where the other would
        have too."""
        if self.timely.get(aim, since) > since:
            return False
        return any(
            since <= put and now - EVIDENCE_S <= came <= now - self.phases.interval
            for k, kept in self.answers.items()
            if k != aim
            for came, put in kept
        )

    def aim(self, record: Demand, chosen: str | None) -> str | None:
        """The hash key to put a record under: `chosen` for a Record without an Idempotency-Key
        (a keyed one keeps its partition, where its retries meet), its record's for a Cancel;
        None to go by the partition key. A front frame's records (one a counter) all go to the
        one shard, as a Lambda container's lone record does."""
        if isinstance(record, Cancel):
            placed = self.placed.get(record.key)
            return placed[0] if placed else None  # by the partition key: its record's shard
        if not isinstance(record, Record) or record.idempotency_key:
            return None
        return chosen

    def landed(self, key: str, aim: str | None, shard: str, read_phase: float) -> None:
        """Keep where a record landed (`read_phase`: its shard's, as read, if not listed)."""
        phase = self.phases.of.get(shard)
        if phase is None:
            phase = read_phase
            if self.phases:  # a shard not listed (a reshard): list them again, at the next put
                self.listed = -SHARDS_EVERY_S
        self.placed[key] = (aim, phase)
        if len(self.placed) > PLACED:
            self.placed.popitem(last=False)

    def phase(self, key: str) -> float:
        placed = self.placed.get(key)
        return placed[1] if placed else 0.0


@dataclass
class _Cursor:
    position: str | None  # the last sequence handed out (or the checkpoint it started from)
    iterator: str | None = None
    last_read: float = 0.0  # monotonic time the last GetRecords of the shard was made


class KinesisStream:
    durable = True

    def __init__(
        self,
        client: Any,
        calls: AwsCaller,
        name: str,
        metrics: Metrics,
        spread: int = 1,
        read_interval: float = 0.2,
        phased: bool = False,
    ) -> None:
        self.client, self.calls, self.metrics = client, calls, metrics
        self.stream_name = name
        self.name = name  # in the lease table; made unique to this stream by shards()
        self._identified = False
        self.spread, self.read_interval = spread, read_interval
        self._pending: deque[Waiter] = deque()
        self._flushing: asyncio.Task[None] | None = None
        self._cursors: dict[str, _Cursor] = {}
        self._behind: dict[str, float] = {}
        self._wall = beats.Wall()
        self.reads = Reads()  # GetRecords calls in flight (the batcher's gather waits for them)
        self.phased = phased
        # phased: where puts aim, where they landed, which shards they avoid
        self.placement = Placement(read_interval, metrics)
        self._read_phases: dict[str, float] = {}  # phased: every shard's phase, for reads
        self._starts: dict[str, str] = {}  # every shard's starting hash key: puts aimed at it
        self.put_times = beats.Times(0.01, 0.005)  # first guess: AWS's (latency.json)

    def partition(self, record: Demand) -> str:
        if self.spread == 1:
            return record.counter
        # By the Idempotency-Key (its retries meet on one shard), else by the reply key: a
        # record's Cancel, which carries both, goes to the record's shard, after it.
        basis = record.idempotency_key or record.key
        return f"{record.counter}#{zlib.crc32(basis.encode()) % self.spread}"

    async def put(self, records: Sequence[Demand], shard: str | None = None) -> None:
        """`shard`: under its starting hash key (ExplicitHashKey), which the shard read holds
        (it is listed before it is read), or after a reshard its child's."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        chosen = None
        if self.phased and shard is None:
            await self._list_open()
            chosen = self.placement.chosen(time.time() + self.put_times.likely() + PUT_GUARD_S)
        aim = self.placement.aim if self.phased else lambda record, chosen: None
        on = self._starts.get(shard) if shard is not None else None
        rows = [(encode(r), self.partition(r), on or aim(r, chosen), r.key) for r in records]
        self._pending.append((rows, done))
        if self._flushing is None or self._flushing.done():
            self._flushing = loop.create_task(self._flush())
        await done

    def before_beat(self, takes: float, after: float = 0.0) -> float | None:
        """Seconds from now to the last moment, `after` seconds from now or later, that a put
        that `takes` seconds (and PUT_GUARD_S) may begin and still return before a read: the
        next beat, when batchers read every shard on the same beats; on phased beats, the next
        beat of the shard read first after such a put returns, where `put` aims it. None where
        there are no beats, or on phased beats before the shards are listed."""
        phases = self.placement.phases
        if self.read_interval <= 0 or (self.phased and not phases):
            return None
        margin = takes + PUT_GUARD_S
        now = time.time()
        returns = now + max(0.0, after) + margin
        phase = self.placement.choose(returns)[1] if self.phased else 0.0
        return beats.beat(returns, self.read_interval, phase) - margin - now

    def phase(self, key: str) -> float:
        """The phase of the shard the record of reply key `key` landed on (0 when not phased, or
        not known)."""
        return self.placement.phase(key)

    async def _list_open(self) -> None:
        """Phased: list the open shards, if not listed for SHARDS_EVERY_S. A listing that fails
        leaves puts to their partition keys until the next."""
        if time.monotonic() - self.placement.listed < SHARDS_EVERY_S:
            return
        self.placement.listed = time.monotonic()
        try:
            listed = await self._list()
        except NumeratorError as exc:
            log.warning("cannot list the shards (records go by partition key): %s", exc)
            return
        open_ = [
            (s["ShardId"], int(s["HashKeyRange"]["StartingHashKey"]))
            for s in listed
            if "EndingSequenceNumber" not in s.get("SequenceNumberRange", {})
        ]
        self.placement.phases = beats.Phases(self.read_interval, open_)

    async def _flush(self) -> None:
        while self._pending:
            batch: list[Waiter] = []
            size = count = 0
            while self._pending:
                rows, _ = self._pending[0]
                more = sum(len(data) + len(key) for data, key, _, _ in rows)
                full = count + len(rows) > PUT_RECORDS_MAX or size + more > PUT_RECORDS_MAX_BYTES
                if batch and full:
                    break
                batch.append(self._pending.popleft())
                size, count = size + more, count + len(rows)
            await self._put_batch(batch)

    async def _put_batch(self, batch: list[Waiter]) -> None:
        rows = [row for rows, _ in batch for row in rows]
        todo = list(range(len(rows)))
        try:
            async for _ in Retries(PUT_ATTEMPTS, cap=1.0):
                todo = await self._send(rows, todo)
                if not todo:
                    break
        except BaseException as exc:  # every waiter hears of it; the flush goes on with the next
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            if not isinstance(exc, NumeratorError):
                raise
            return
        failed = set(todo)
        first = 0
        for rows_of, done in batch:
            mine = range(first, first + len(rows_of))
            first += len(rows_of)
            if done.done():
                continue
            if failed.intersection(mine):
                done.set_exception(StreamFull(f"Kinesis throttled the put {PUT_ATTEMPTS} times"))
            else:
                done.set_result(None)

    async def _send(self, rows: list[Row], todo: list[int]) -> list[int]:
        """Put rows `todo` once (PutRecord for one, else PutRecords): those left to put again."""
        began = time.monotonic()
        if len(todo) == 1:
            row = rows[todo[0]]
            one = await self.calls(
                self.client.put_record, StreamName=self.stream_name, **_entry(row)
            )
            self.put_times.add(time.monotonic() - began)
            if self.phased:
                shard = one.get("ShardId", "")
                self.placement.landed(row[3], row[2], shard, self._read_phases.get(shard, 0.0))
            return []
        out = await self.calls(
            self.client.put_records,
            StreamName=self.stream_name,
            Records=[_entry(rows[i]) for i in todo],
        )
        self.put_times.add(time.monotonic() - began)
        results = out.get("Records", [])
        if self.phased:
            for i, result in zip(todo, results, strict=False):
                if "ShardId" in result:
                    shard = result["ShardId"]
                    read = self._read_phases.get(shard, 0.0)
                    self.placement.landed(rows[i][3], rows[i][2], shard, read)
        if not out.get("FailedRecordCount"):
            return []
        left = [i for i, r in zip(todo, results, strict=True) if "ErrorCode" in r]
        self.metrics.aws_retries.inc("throttled", len(left))
        return left

    async def identity(self) -> str:
        """The stream's name in the lease and batcher tables. A stream deleted and made again
        under the same name (a restarted moto or LocalStack, say) numbers its records afresh:
        its checkpoints must not be the old stream's, so the tables know it by name and
        creation time."""
        if not self._identified:
            await self._describe(tries=0)
        return self.name

    async def ping(self) -> None:
        """Describe the stream, once (for /healthz): AwsUnavailable, or MissingResource."""
        await self._describe(tries=1)

    async def _describe(self, tries: int) -> None:
        out = await self.calls(
            self.client.describe_stream_summary, tries=tries, StreamName=self.stream_name
        )
        if not self._identified:
            created = out["StreamDescriptionSummary"]["StreamCreationTimestamp"]
            self.name = f"{self.stream_name}@{created.timestamp():.0f}"
            self._identified = True

    async def shards(self) -> dict[str, tuple[str, ...]]:
        await self.identity()
        found: dict[str, tuple[str, ...]] = {}
        for shard in await self._list():
            parents = (shard.get("ParentShardId"), shard.get("AdjacentParentShardId"))
            found[shard["ShardId"]] = tuple(p for p in parents if p)
            start = int(shard.get("HashKeyRange", {}).get("StartingHashKey", 0))
            self._read_phases[shard["ShardId"]] = beats.phase_of(start, self.read_interval)
            self._starts[shard["ShardId"]] = str(start)
        return found

    async def _list(self) -> list[dict[str, Any]]:
        """Every shard of the stream, as ListShards describes it, page by page."""
        listed: list[dict[str, Any]] = []
        arguments: dict[str, Any] = {"StreamName": self.stream_name}
        while True:
            out = await self.calls(self.client.list_shards, **arguments)
            listed += out["Shards"]
            if not out.get("NextToken"):
                return listed
            arguments = {"NextToken": out["NextToken"]}

    async def read(self, shard: str, after: str | None, limit: int, wait: float) -> list[Entry]:
        cursor = self._cursors.get(shard)
        if cursor is None or cursor.position != after:
            last = cursor.last_read if cursor else 0.0
            cursor = self._cursors[shard] = _Cursor(after, last_read=last)
        deadline = time.monotonic() + wait
        while True:
            now = time.monotonic()
            due = self._due(shard, cursor, now)
            if now < due:
                if due > deadline:
                    await asyncio.sleep(max(0.0, deadline - now))
                    return []
                await sleep_until(due)
            entries = await self._get(shard, cursor, limit)
            if entries or time.monotonic() >= deadline:
                return entries

    def _due(self, shard: str, cursor: _Cursor, now: float) -> float:
        """The monotonic time of the shard's next read: its beat, by the wall clock."""
        offset = self._wall.offset()
        earliest = cursor.last_read + self.read_interval + offset
        behind = self._behind.get(shard, 0.0) > 0
        phase = self._read_phases.get(shard, 0.0) if self.phased else 0.0
        due = beats.next_read(now + offset, earliest, self.read_interval, behind, phase) - offset
        return due if due - now > 1e-6 else now  # "now", come back by way of a Unix time

    async def _get(self, shard: str, cursor: _Cursor, limit: int) -> list[Entry]:
        for _ in range(2):
            if cursor.iterator is None:
                cursor.iterator = await self._iterator(shard, cursor.position)
            cursor.last_read = time.monotonic()
            self.reads.reading += 1
            try:
                out = await self.calls(
                    self.client.get_records, ShardIterator=cursor.iterator, Limit=min(limit, 10_000)
                )
                break
            except AwsRefused as exc:
                if exc.code != "ExpiredIteratorException":
                    raise
                cursor.iterator = None  # made again from the position, once
            finally:
                self.reads.reading -= 1
                if self.reads.read_ended is not None:  # once the read's records are in a frame
                    asyncio.get_running_loop().call_soon(self.reads.read_ended)
        else:
            return []
        cursor.iterator = out.get("NextShardIterator")
        self._behind[shard] = out.get("MillisBehindLatest", 0) / 1000
        entries = [_read(shard, r) for r in out["Records"]]
        if entries:
            cursor.position = entries[-1].sequence
        elif cursor.iterator is None:
            raise ShardEnded(f"shard {shard} is closed and read to its end")
        return entries

    async def _iterator(self, shard: str, after: str | None) -> str:
        where: dict[str, Any] = (
            {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": after}
            if after
            else {"ShardIteratorType": "TRIM_HORIZON"}
        )
        out = await self.calls(
            self.client.get_shard_iterator, StreamName=self.stream_name, ShardId=shard, **where
        )
        return str(out["ShardIterator"])

    def lag(self, shard: str) -> float | None:
        return self._behind.get(shard)


def _read(shard: str, got: dict[str, Any]) -> Entry:
    """A record of a GetRecords's answer as an entry, with its arrival stamp."""
    entry = Entry.decode(shard, got["SequenceNumber"], got["Data"])
    arrived = got.get("ApproximateArrivalTimestamp")
    if arrived is not None:
        entry.arrived = arrived.timestamp()
    return entry


def _entry(row: Row) -> dict[str, Any]:
    """A row as the put's parameters: a PutRecord's, or one record of a PutRecords."""
    data, key, aim, _ = row
    return {"Data": data, "PartitionKey": key, **({"ExplicitHashKey": aim} if aim else {})}


async def sleep_until(due: float) -> None:
    """Sleep until the monotonic time `due`, to within a few microseconds when the loop is idle.
    A shard's next read may not begin sooner than the interval after its last, so a read's
    lateness carries over to the next: a millisecond a beat adds up to a skipped beat about
    every tenth (measured on moto), where yielding for the last millisecond costs a fraction of
    a millisecond of CPU a read."""
    await asyncio.sleep(max(0.0, due - time.monotonic() - TIMER_S))
    while time.monotonic() < due:  # noqa: ASYNC110 (a time, not an event, is awaited)
        await asyncio.sleep(0)
