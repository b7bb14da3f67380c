"""The Replies port on Amazon DynamoDB (boto3, through `AwsCaller`).

The table's key is (`k`, `f`); every item has `r`, its encoded replies, `x`, the Unix time the
table's TTL removes it at, and `w`, the Unix time it could likely be read at (its write's start and
the mean time of this process's reply writes). The batcher writes them with BatchWriteItem, 25 a
call, retrying UnprocessedItems with backoff, in one of two shapes, chosen by each reply's key
(infra/wire.py `grouped`):

- a record's own reply, `k` its reply key and `f` "-": for the Lambda edge, whose containers each
  await one request and come and go. The edge reads its key with a strongly consistent
  BatchGetItem, 100 keys a call.
- one item per long-running edge per published frame, `k` the edge's id (its reply keys' prefix)
  and `f` when it was published (nanoseconds, zero-padded, so that they sort by time) and a tag:
  `r` is every reply of the frame for that edge, one a line. The edge reads them with one
  strongly consistent Query of its partition from when its oldest waiting record was put, less
  SKEW_S for clocks that differ. DynamoDB bills an item written by its size (1 KB a unit) and a
  Query by the size it reads (4 KB a unit), not by the replies in it, so a frame's replies to one
  edge cost one write and a share of a read, where one item each cost a write and a read each
  (docs/performance.md, "Replies a frame at a time").

Either way a reply is found by its key alone (the key names its edge), for as long as the TTL
keeps it. ONE poller per process (per event loop) reads every outstanding key, not one loop per
request, and reads a key when its reply is expected: the batchers read the stream on the beats of
the read interval (infra/adapters/beats.py), so a record whose put returned is read at the next
beat, and its reply is in the table `lag()` after it (a read, a frame, a commit and a reply write:
learned from the `w` of the items found, within half the interval). A key not found is
read again a beat later, at the same lag, until the request's deadline, then
ReplyTimeout (504); a key this process did not put (looked up by key alone) is read at once, then
on the beats. Keys expected at one beat are read together: one BatchGetItem (100 keys a call) or
one Query per edge a beat.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from infra.adapters import beats
from infra.adapters.aws import AwsCaller
from infra.backoff import Retries
from infra.errors import AwsRefused, AwsUnavailable, NumeratorError, ReplyTimeout
from infra.observe import traces
from infra.observe.metrics import Metrics
from infra.wire import BadReply, Reply, bounded, decode_reply, edge_of_key, encode, grouped

log = logging.getLogger("numerator.replies")

WRITE_BATCH, READ_BATCH = 25, 100
WRITE_ATTEMPTS = 8
WARN_EVERY_S = 5.0
OVERDUE_S, OVERDUE_BEATS = 1.0, 5
"""A reply not found this long after its record's put (and at least this many read intervals)
is overdue: the stream is told (`overdue`), and on phased beats puts avoid its shard a while."""
TICK_S = 0.02  # the longest the poller sleeps: a key looked up by key alone waits no longer
TOGETHER_S = 0.002  # keys due this close are one beat's (their clocks were read apart): one read
OWN = "-"  # the sort key of a record's own reply item
SKEW_S = 0.1
"""How far a batcher's clock (which stamps a frame's item) may be behind the edge's (which says
from when to read), for a reply that comes in time: AWS's hosts keep within a millisecond of
Amazon Time Sync. The look back grows with the wait (as far back again as the key has waited), so
that a host whose clock is off by up to about WINDOW_S / 2 delays its replies and loses none."""
WINDOW_S = 2.0
"""The longest span of an edge's items one Query reads back from now. A reply is stamped when it
is published, so a poll that read until now finds it within a poll; reading back further only
made every poll of an edge with one old waiting key (a frozen shard, Postgres restarting) read
all its items since then, and under the soak the polls fell behind their keys (10 times the
504s of an item per record)."""
ITEM_BYTES = 300_000  # a frame's replies to one edge per item, below DynamoDB's 400 KB an item


@dataclass
class _Wait:
    future: asyncio.Future[Reply]
    due: float | None  # monotonic time of its next read; None: its first, a lag after `beat`
    since: float  # Unix time its record was (about to be) put: its frame's item is not older
    beat: float = 0.0  # Unix time of the beat expected to read its record (0: not known)
    via: str = "table"  # how its reply came: "push" when a batcher pushed it (its trace says)
    told: bool = False  # its reply was overdue, and the stream was told


@dataclass
class _Poller:
    waits: dict[str, _Wait] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


def stamp(now: float) -> str:
    """A frame item's sort key: its time, sortable as text, and a tag of its own."""
    return f"{int(now * 1e9):020d}-{uuid.uuid4().hex[:8]}"


class DynamoReplies:
    def __init__(
        self,
        client: Any,
        calls: AwsCaller,
        table: str,
        metrics: Metrics,
        ttl: float = 3600,
        interval: float = 0.2,
        lag: float = 0.05,
        phase: Callable[[str], float] = lambda key: 0.0,
        overdue: Callable[[str, float], None] = lambda key, waited: None,
        replied: Callable[[str, bool, float], None] = lambda key, timely, waited: None,
    ) -> None:
        """`interval`: the batchers' READ_INTERVAL_MS, in seconds: they read on its beats;
        `lag`: seconds from a beat to when the replies of the records read on it are written;
        `phase`: the phase of the beats of the shard a key's record was put on (phased beats:
        the stream's `phase`); `overdue`: told once of a key this process put whose reply has
        not come within OVERDUE_BEATS intervals (OVERDUE_S at least) of its put (the stream's
        `Placement.slow`: its shard avoided for a while); `replied`: told of each key whose
        reply came, whether before it was overdue, and how long after its put (`Placement.heard`:
        its shard is read)."""
        self.client, self.calls, self.table, self.metrics = client, calls, table, metrics
        self.ttl, self.interval, self.phase, self.overdue = ttl, interval, phase, overdue
        self.replied = replied
        self.overdue_s = max(OVERDUE_S, OVERDUE_BEATS * interval)
        self.lags = beats.Times(lag, 0.0)
        """From a beat to when the replies of the records read on it can be read, as this process
        has seen them written (each item says when: `w`); `lag` is the first guess."""
        self.writes = beats.Times(0.005, 0.0025)  # this process's writes; AWS's (latency.json)
        self._wall = beats.Wall()
        self._poller = _Poller()
        self._warned, self._failed = -WARN_EVERY_S, 0

    async def ping(self) -> None:
        """Describe the reply table (for /healthz): AwsUnavailable, or MissingResource, if it
        does not answer."""
        await self.calls(self.client.describe_table, tries=1, TableName=self.table)

    def expect(self, key: str, since: float | None = None) -> None:
        """`since`: the Unix time the record is put at (now); 0 to look through every item of
        the key's edge the table keeps (a key this process did not put)."""
        loop = asyncio.get_running_loop()
        when = time.time() if since is None else since
        waiting = _Wait(loop.create_future(), time.monotonic(), when)
        if when:
            waiting.due, waiting.beat = None, self._beat()
        self._poller.waits[key] = waiting

    def _beat(self, phase: float = 0.0) -> float:
        """The beat (Unix time) that reads a record whose put returned now, to a shard read on
        the beats of `phase`. Worked out from one offset, the beats of keys put apart agree to
        the bit (`beats.Wall`), and so do their first reads: a lag after it, the lag as it is
        when they are due, so that they share one read."""
        return beats.beat(time.monotonic() + self._wall.offset(), self.interval, phase)

    def lag(self) -> float:
        """Seconds from a beat to the first read of its replies: when most of them have been
        written, as this process has seen (the mean and twice the mean deviation; REPLY_LAG_MS
        and BACK_FRAME_MS until then), within half the interval. A reply written after the
        read waits a whole interval for the next, so reading where most are written costs a
        request less on average than reading sooner, and a first guess too short for the
        endpoint is corrected, not paid for by every request (docs/performance.md, "Read beats")."""
        return min(self.lags.likely(), self.interval / 2)

    def _due(self, wait: _Wait, lag: float, offset: float) -> float:
        return wait.due if wait.due is not None else wait.beat + lag - offset

    def forget(self, key: str) -> None:
        self._poller.waits.pop(key, None)

    async def publish(self, replies: Sequence[Reply]) -> None:
        now = time.time()
        expires = str(int(now + self.ttl))
        items: list[dict[str, Any]] = []
        frames: defaultdict[str, list[bytes]] = defaultdict(list)
        for reply in replies:
            if grouped(reply.key):
                frames[edge_of_key(reply.key)].append(encode(reply))
            else:
                items.append(_item(reply.key, OWN, encode(reply), expires))
        for edge, lines in frames.items():
            for part in bounded(lines, ITEM_BYTES):
                items.append(_item(edge, stamp(now), b"\n".join(part), expires))
        chunks = [items[i : i + WRITE_BATCH] for i in range(0, len(items), WRITE_BATCH)]
        results = await asyncio.gather(*(self._write(c) for c in chunks), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        self.metrics.reply_items.inc("written", len(items))
        self.metrics.reply_units.inc("write", sum(-(-size(item) // 1024) for item in items))

    async def _write(self, items: list[dict[str, Any]]) -> None:
        requests = [{"PutRequest": {"Item": item}} for item in items]
        async for _ in Retries(WRITE_ATTEMPTS, cap=1.0):
            # A frame item is stamped as it is written again: one stamped at the first try and
            # written seconds later would lie before where its edge reads (WINDOW_S back). Every
            # item says when it is likely readable (`w`): now and a write's mean time here.
            began = time.monotonic()
            written = {"N": f"{time.time() + self.writes.mean:.4f}"}
            for request in requests:
                item = request["PutRequest"]["Item"]
                item["w"] = written
                if item["f"]["S"] != OWN:
                    item["f"] = {"S": stamp(time.time())}
            out = await self.calls(
                self.client.batch_write_item, RequestItems={self.table: requests}
            )
            self.writes.add(time.monotonic() - began)
            requests = out.get("UnprocessedItems", {}).get(self.table, [])
            if not requests:
                return
            self.metrics.aws_retries.inc("unprocessed", len(requests))
        raise AwsUnavailable(f"DynamoDB left {len(requests)} replies unwritten")

    async def wait(self, key: str, timeout: float) -> Reply:
        poller = self._poller
        if key not in poller.waits:
            self.expect(key, since=0.0)
        waiting = poller.waits[key]
        if waiting.since:  # the put returned just now: its record is read at the next beat
            waiting.due, waiting.beat = None, self._beat(self.phase(key))
        if poller.task is None or poller.task.done():
            poller.task = asyncio.get_running_loop().create_task(self._poll())
        try:
            # Not asyncio.wait_for: it returns a reply that came as the wait was cancelled (its
            # client gone), swallowing the cancel, so that no one gave those values up.
            async with asyncio.timeout(timeout):
                reply = await asyncio.shield(waiting.future)
            waited = time.time() - waiting.since if waiting.since else 0.0
            self.replied(key, waited <= self.overdue_s, waited)
            if traces.ON:  # on the wait's trace span: pushed, or read from the table
                traces.delivered(waiting.via)
            return reply
        except TimeoutError:
            raise ReplyTimeout(f"no reply within {timeout:g}s") from None
        finally:
            poller.waits.pop(key, None)

    async def _poll(self) -> None:
        waits = self._poller.waits
        while waits:
            now = time.monotonic()
            lag, offset = self.lag(), self._wall.offset()
            when = {k: self._due(w, lag, offset) for k, w in waits.items() if not w.future.done()}
            due = [k for k, at in when.items() if at <= now + TOGETHER_S]
            if not due:
                soonest = min(when.values(), default=now + TICK_S)
                await asyncio.sleep(min(TICK_S, max(soonest - now, 0.001)))
                continue
            own: list[str] = []
            edges: dict[str, float] = {}  # edge: when to read its items from
            wall = time.time()
            for key in due:
                wait = waits[key]
                if wait.since and not wait.told and wall - wait.since > self.overdue_s:
                    wait.told = True
                    self.overdue(key, wall - wait.since)
                # a key looked up by key alone was read at once: from now on, on the beats
                wait.due = (
                    beats.read_again(when[key], now, self.interval)
                    if wait.since
                    else beats.first_read(now + offset, self.interval, lag) - offset
                )
                if grouped(key):
                    edge = edge_of_key(key)
                    back = wait.since - SKEW_S - max(0.0, wall - wait.since)
                    if wait.since:  # a key this process put (not one looked up by key alone)
                        back = max(back, wall - WINDOW_S)
                    edges[edge] = min(edges.get(edge, back), back)
                else:
                    own.append(key)
            chunks = [own[i : i + READ_BATCH] for i in range(0, len(own), READ_BATCH)]
            await asyncio.gather(
                *(self._read(chunk) for chunk in chunks),
                *(self._query(edge, since) for edge, since in edges.items()),
            )

    def _warn(self, exc: NumeratorError) -> None:
        """Say a read failed, once every WARN_EVERY_S at most: a refusing table fails every
        tick, and a line each flooded the log."""
        now = time.monotonic()
        self._failed += 1
        if now - self._warned >= WARN_EVERY_S:
            log.warning("cannot read replies (%d failed reads): %s", self._failed, exc)
            self._warned, self._failed = now, 0

    def _refused(self, keys: Sequence[str], exc: AwsRefused) -> None:
        """Read again, it is refused again: its waiters are told now."""
        self._warn(exc)
        for key in keys:
            wait = self._poller.waits.get(key)
            if wait is not None and not wait.future.done():
                wait.future.set_exception(exc)

    def pushed(self, lines: list[bytes]) -> int:
        """Answer the waits of the reply lines a batcher pushed (infra/adapters/push.py) before
        their table read; how many it answered (one already answered, or no longer waited for,
        is left be)."""
        found = [wait for wait in map(self._found, lines) if wait is not None]
        for wait in found:
            wait.via = "push"
        answered = len(found)
        self.metrics.replies_pushed.inc(answered)
        return answered

    def _found(self, raw: bytes) -> _Wait | None:
        """Answer the wait of the reply `raw` (one line of a frame item): that wait, if any."""
        waits = self._poller.waits
        try:
            reply = decode_reply(raw)
        except BadReply as exc:
            key = _key_of(raw)
            wait = waits.get(key) if key else None
            if wait is not None and not wait.future.done():
                wait.future.set_exception(BadReply(f"unreadable reply item: {exc}"))
            return None
        wait = waits.get(reply.key)
        if wait is None or wait.future.done():
            return None
        wait.future.set_result(reply)
        return wait

    def _learn(self, item: dict[str, Any], wait: _Wait) -> None:
        """Learn from an item found for `wait` how long after its beat a reply can be read: the
        item says when it was (`w`). One written an interval later or more is taken as read a
        beat late (a put slower than its margin) and counted from that beat; two or more late
        (replies published again after a crash) says nothing of the next beat's, and is left
        out. A reply written late is still counted, from the beat it was expected at: left
        out, the lag would shrink to what was found, and then more would be late."""
        written = item.get("w", {}).get("N")
        if written is None or not wait.beat:
            return
        self.metrics.reply_found_seconds.observe(max(0.0, time.time() - float(written)))
        took = float(written) - wait.beat
        if took >= self.interval:
            took -= self.interval
        if 0 < took < self.interval:
            self.lags.add(took)
            self.metrics.reply_lag_seconds.set(self.lag())

    async def _read(self, keys: list[str]) -> None:
        try:
            out = await self.calls(
                self.client.batch_get_item,
                RequestItems={
                    self.table: {
                        "Keys": [{"k": {"S": k}, "f": {"S": OWN}} for k in keys],
                        "ConsistentRead": True,
                        "ProjectionExpression": "k, r, w",
                    }
                },
            )
        except AwsRefused as exc:
            self._refused(keys, exc)
            return
        except NumeratorError as exc:  # the keys are read again at their next step
            self._warn(exc)
            return
        self.metrics.reply_items.inc("read", len(keys))  # a missing item is billed too
        found = out.get("Responses", {}).get(self.table, [])
        self.metrics.reply_units.inc("read", len(keys))  # a reply is well under 4 KB
        waits = self._poller.waits
        for item in found:
            wait = waits.get(item["k"]["S"])
            if wait is None or wait.future.done():
                continue
            self._learn(item, wait)
            try:
                wait.future.set_result(decode_reply(item["r"]["S"].encode()))
            except (BadReply, KeyError) as exc:
                wait.future.set_exception(BadReply(f"unreadable reply item: {exc}"))

    async def _query(self, edge: str, since: float) -> None:
        """Every frame item of `edge` stamped since `since` (Unix time), page by page."""
        arguments: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "k = :e AND f >= :since",
            "ExpressionAttributeValues": {
                ":e": {"S": edge},
                ":since": {"S": f"{int(max(0.0, since) * 1e9):020d}"},
            },
            "ConsistentRead": True,
        }
        while True:
            try:
                out = await self.calls(self.client.query, **arguments)
            except AwsRefused as exc:
                self._refused([k for k in self._poller.waits if edge_of_key(k) == edge], exc)
                return
            except NumeratorError as exc:
                self._warn(exc)
                return
            self.metrics.reply_items.inc("read", out.get("Count", 0))
            read = sum(size(item) for item in out.get("Items", []))
            self.metrics.reply_units.inc("read", max(1, -(-read // 4096)))
            for item in out.get("Items", []):
                lines = item.get("r", {}).get("S", "").encode().split(b"\n")
                answered = [self._found(line) for line in lines]
                first = next((w for w in answered if w is not None and w.beat), None)
                if first is not None:  # one time an item: its replies were written together
                    self._learn(item, first)
            if "LastEvaluatedKey" not in out:
                return
            arguments["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB bills it: its attributes' names and values, in bytes (a
    number's digits about half a byte each)."""
    total = 0
    for name, value in item.items():
        text = value.get("S") if "S" in value else value.get("N", "")
        total += len(name) + len(text.encode()) if "S" in value else len(name) + len(text) // 2 + 1
    return total


def _item(key: str, sort: str, raw: bytes, expires: str) -> dict[str, Any]:
    return {"k": {"S": key}, "f": {"S": sort}, "r": {"S": raw.decode()}, "x": {"N": expires}}


def _key_of(raw: bytes) -> str | None:
    """The reply key of a reply that does not decode, when it can be read."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    key = data.get("k") if isinstance(data, dict) else None
    return key if isinstance(key, str) else None
