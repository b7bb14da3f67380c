"""The Replies contract, run unchanged against every adapter: in memory, and DynamoDB (on moto
server, or the endpoint AWS_ENDPOINT_URL names); then what the DynamoDB adapter adds."""

from __future__ import annotations

import asyncio
import random
import time
from datetime import date
from typing import Any

import pytest

from infra.adapters import beats
from infra.adapters.aws import AwsCaller
from infra.adapters.dynamodb import DynamoReplies
from infra.adapters.memory import MemoryReplies
from infra.adapters.serverless import aws_ports
from infra.errors import ReplyTimeout
from infra.observe.metrics import Metrics
from infra.ports import Replies
from infra.settings import Settings
from infra.wire import BadReply, Reply, ReplyError, encode


def dynamo(aws: tuple[Settings, Any], metrics: Metrics) -> DynamoReplies:
    settings, found = aws
    return DynamoReplies(
        found.dynamodb, AwsCaller(8, metrics), settings.aws.reply_table, metrics, 60, lag=0.01
    )


@pytest.fixture(params=["memory", "dynamodb"])
def replies(request: pytest.FixtureRequest) -> Replies:
    if request.param == "memory":
        return MemoryReplies()
    return dynamo(request.getfixturevalue("aws"), Metrics())


def awaiting(replies: Replies, keys: list[str], timeout: float) -> list[asyncio.Task[Reply]]:
    """Each key expected, then awaited by a task of its own (as the edge's requests do)."""
    for key in keys:
        replies.expect(key)
    return [asyncio.create_task(replies.wait(k, timeout)) for k in keys]


def ok(key: str, n: int = 1) -> Reply:
    return Reply(key, "inv", n, n, "INV-{value:04d}", date(2026, 11, 30))


async def test_a_published_reply_reaches_its_waiter(replies: Replies) -> None:
    replies.expect("a")
    waiter = asyncio.create_task(replies.wait("a", 5))
    await asyncio.sleep(0.05)
    await replies.publish([ok("a", 7)])
    assert await waiter == ok("a", 7)


async def test_a_reply_published_before_the_wait_is_not_missed(replies: Replies) -> None:
    replies.expect("early")
    await replies.publish([ok("early", 3)])
    assert await replies.wait("early", 5) == ok("early", 3)


async def test_error_replies_keep_their_kind(replies: Replies) -> None:
    replies.expect("e")
    bad = Reply("e", "inv", error=ReplyError.COUNTER_NOT_FOUND, detail="no counter named 'inv'")
    await replies.publish([bad])
    assert await replies.wait("e", 5) == bad


async def test_no_reply_is_a_timeout_in_about_the_time_asked(replies: Replies) -> None:
    replies.expect("never")
    began = time.monotonic()
    with pytest.raises(ReplyTimeout):
        await replies.wait("never", 0.3)
    assert 0.25 <= time.monotonic() - began < 3


async def test_many_waiters_each_get_their_own_reply(replies: Replies) -> None:
    keys = [f"m{i}" for i in range(250)]
    waiters = awaiting(replies, keys, 10)
    await replies.publish([ok(k, i) for i, k in enumerate(keys)])
    got = await asyncio.gather(*waiters)
    assert [r.first for r in got] == list(range(250))


async def test_dynamodb_writes_25_a_call_and_reads_many_keys_a_call(
    aws: tuple[Settings, Any],
) -> None:
    metrics = Metrics()
    table = dynamo(aws, metrics)
    keys = [f"k{i}" for i in range(250)]
    waiters = awaiting(table, keys, 10)
    await table.publish([ok(k) for k in keys])
    await asyncio.gather(*waiters)
    calls = metrics.aws_calls.values
    assert calls["batch_write_item"] == 10  # 250 replies, 25 a call
    assert calls["batch_get_item"] <= 30, calls  # one poller for all, 100 keys a call
    settings, found = aws
    item = found.dynamodb.get_item(
        TableName=settings.aws.reply_table, Key={"k": {"S": "k0"}, "f": {"S": "-"}}
    )
    assert abs(int(item["Item"]["x"]["N"]) - (time.time() + 60)) < 30  # the TTL attribute


async def test_dynamodb_unprocessed_items_are_written_again(aws: tuple[Settings, Any]) -> None:
    settings, found = aws

    class Unprocessed:
        def __init__(self) -> None:
            self.first = True

        def batch_write_item(self, **kwargs: Any) -> dict[str, Any]:
            requests = kwargs["RequestItems"][settings.aws.reply_table]
            if self.first:  # as DynamoDB does under load: half of them left for later
                self.first = False
                found.dynamodb.batch_write_item(
                    RequestItems={settings.aws.reply_table: requests[:2]}
                )
                return {"UnprocessedItems": {settings.aws.reply_table: requests[2:]}}
            return dict(found.dynamodb.batch_write_item(**kwargs))

        def __getattr__(self, name: str) -> Any:
            return getattr(found.dynamodb, name)

    metrics = Metrics()
    table = DynamoReplies(Unprocessed(), AwsCaller(2, metrics), settings.aws.reply_table, metrics)
    await table.publish([ok(f"u{i}") for i in range(5)])
    reader = dynamo(aws, Metrics())
    assert [(await reader.wait(f"u{i}", 5)).key for i in range(5)] == [f"u{i}" for i in range(5)]
    assert metrics.aws_retries.values["unprocessed"] == 3


async def test_dynamodb_an_unreadable_reply_is_a_bad_reply(aws: tuple[Settings, Any]) -> None:
    settings, found = aws
    found.dynamodb.put_item(
        TableName=settings.aws.reply_table,
        Item={
            "k": {"S": "future"},
            "f": {"S": "-"},
            "r": {"S": '{"v": 2, "k": "future"}'},
            "x": {"N": "1"},
        },
    )
    with pytest.raises(BadReply):
        await dynamo(aws, Metrics()).wait("future", 5)


# Replies a frame at a time: the keys of a long-running edge (infra/wire.py `grouped`).

EDGE = "g0123456789abcde"


def keys_of(edge: str, n: int) -> list[str]:
    return [f"{edge}-{i}" for i in range(n)]


@pytest.mark.parametrize("kind", ["memory", "dynamodb"])
async def test_a_long_running_edges_replies_reach_their_waiters(
    kind: str, request: pytest.FixtureRequest
) -> None:
    replies: Replies = (
        MemoryReplies() if kind == "memory" else dynamo(request.getfixturevalue("aws"), Metrics())
    )
    keys = keys_of(EDGE, 40)
    waiters = awaiting(replies, keys, 5)
    await replies.publish([ok(k, i) for i, k in enumerate(keys[:25])])
    await replies.publish([ok(k, i) for i, k in enumerate(keys[25:], 25)])
    assert [r.first for r in await asyncio.gather(*waiters)] == list(range(40))


async def test_dynamodb_a_frames_replies_to_one_edge_are_one_item_read_together(
    aws: tuple[Settings, Any],
) -> None:
    """The server edge's bill: 250 replies of one frame to one edge are one item written and
    read by one Query, where one item per reply took 250 writes and 250 reads."""
    metrics = Metrics()
    table = dynamo(aws, metrics)
    keys = keys_of(EDGE + "1", 250)
    waiters = awaiting(table, keys, 10)
    await asyncio.sleep(0.05)  # the first reads find nothing: they cost a Query, no item
    await table.publish([ok(k) for k in keys])
    await asyncio.gather(*waiters)
    items, calls = metrics.reply_items.values, metrics.aws_calls.values
    assert items["written"] == 1 and calls["batch_write_item"] == 1
    assert items["read"] == 1, items
    # Billed by size: the replies' bytes (and some for the item's key), a write unit per KB, a
    # read unit per 4 KB of the one Query that found them and one for each that found nothing.
    body = len(b"\n".join(encode(ok(k)) for k in keys))
    units = metrics.reply_units.values
    assert -(-body // 1024) <= units["write"] <= -(-(body + 100) // 1024), (body, units)
    empty = calls["query"] - 1
    assert -(-body // 4096) <= units["read"] - empty <= -(-(body + 100) // 4096), (body, units)
    assert "batch_get_item" not in calls
    assert calls["query"] <= 5, calls


async def test_dynamodb_a_frame_item_written_again_is_stamped_again(
    aws: tuple[Settings, Any],
) -> None:
    """A frame item DynamoDB left unprocessed is stamped anew when it is written again: stamped
    once, an item written seconds late would lie before where its edge reads (WINDOW_S back),
    and its waiters would time out with their answer in the table."""
    settings, found = aws
    stamps: list[str] = []

    class Late:
        def __init__(self) -> None:
            self.first = True

        def batch_write_item(self, **kwargs: Any) -> dict[str, Any]:
            requests = kwargs["RequestItems"][settings.aws.reply_table]
            stamps.append(requests[0]["PutRequest"]["Item"]["f"]["S"])
            if self.first:  # none written this time, and the next try comes 2.5 s on
                self.first = False
                time.sleep(2.5)
                return {"UnprocessedItems": {settings.aws.reply_table: requests}}
            return dict(found.dynamodb.batch_write_item(**kwargs))

        def __getattr__(self, name: str) -> Any:
            return getattr(found.dynamodb, name)

    metrics = Metrics()
    table = DynamoReplies(Late(), AwsCaller(2, metrics), settings.aws.reply_table, metrics)
    reader = dynamo(aws, Metrics())
    keys = keys_of(EDGE + "2", 3)
    waiters = awaiting(reader, keys, 8)
    began = time.time()
    await table.publish([ok(k) for k in keys])
    assert [r.key for r in await asyncio.gather(*waiters)] == keys
    assert len(stamps) == 2 and stamps[1] > stamps[0]
    assert int(stamps[1][:20]) / 1e9 >= began + 2.5, stamps


async def test_dynamodb_a_lambda_containers_reply_keeps_its_own_item(
    aws: tuple[Settings, Any],
) -> None:
    """Keys of another shape (a Lambda container's) keep one item each, read by key."""
    metrics = Metrics()
    table = dynamo(aws, metrics)
    keys = [f"0123456789abcdef-{i}" for i in range(3)]
    for key in keys:
        table.expect(key)
    await table.publish([ok(k) for k in keys])
    await asyncio.gather(*(table.wait(k, 5) for k in keys))
    assert metrics.reply_items.values["written"] == 3
    assert "query" not in metrics.aws_calls.values


async def test_dynamodb_a_frame_reply_is_found_by_its_key_in_another_process(
    aws: tuple[Settings, Any],
) -> None:
    """An answer stays findable by its key alone (a key this process never put: the whole of
    its edge's partition is read), and a frame published again after a takeover answers once."""
    writer = dynamo(aws, Metrics())
    keys = keys_of(EDGE + "2", 3)
    await writer.publish([ok(k, 5) for k in keys])
    await writer.publish([ok(keys[0], 5)])  # the next owner publishes the held replies again
    reader = dynamo(aws, Metrics())
    assert [await reader.wait(k, 5) for k in keys] == [ok(k, 5) for k in keys]


@pytest.mark.parametrize("behind", [0.05, 0.8])
async def test_dynamodb_a_frame_stamped_by_a_slower_clock_is_not_missed(
    aws: tuple[Settings, Any], monkeypatch: pytest.MonkeyPatch, behind: float
) -> None:
    """A batcher whose clock is behind the edge's stamps the frame before the record's put,
    by the edge's clock: the edge reads SKEW_S further back at first, and as far back again as
    its key has waited (within WINDOW_S of now), so that a clock off by most of a second delays
    the reply and loses none."""
    import infra.adapters.dynamodb as module

    table = dynamo(aws, Metrics())
    key = keys_of(EDGE + "3", 1)[0] + f"{behind:g}"
    table.expect(key)
    real = time.time
    monkeypatch.setattr(module.time, "time", lambda: real() - behind)
    await table.publish([ok(key, 9)])
    monkeypatch.setattr(module.time, "time", real)
    began = time.monotonic()
    assert await table.wait(key, 10) == ok(key, 9)
    waited = time.monotonic() - began
    assert waited < 0.5 if behind < module.SKEW_S else behind - 0.3 < waited < behind + 0.7, waited


# Read beats: a batcher reads the stream on the beats of READ_INTERVAL_MS, so an edge reads a
# reply once, a lag after the beat that reads its record (infra/adapters/beats.py).


class OnBeats:
    """A batcher that reads on the beats, as `KinesisStream.read` does, and writes the replies of
    the keys whose put returned before the beat at once: a reply is in the table at a time the
    edge cannot know from its put alone, only from the beat. Counts nothing but what it is
    handed: the test counts the edge's reads."""

    def __init__(self, table: Replies, interval: float, after: float = 0.0) -> None:
        """`after`: seconds past each beat its replies are published (a read, a frame, a
        commit)."""
        self.table, self.interval, self.after = table, interval, after
        self.put: list[tuple[float, str]] = []  # (when its put returned, key)

    async def run(self, keys: int) -> None:
        written = 0
        while written < keys:
            now = time.time()
            beat = beats.beat(now + 1e-3, self.interval)
            await asyncio.sleep(beat - now)
            due = [key for when, key in self.put if when < beat]
            self.put = [(when, key) for when, key in self.put if when >= beat]
            if due:
                await asyncio.sleep(self.after)
                await self.table.publish([ok(key) for key in due])
                written += len(due)


async def requests_on_beats(
    table: Replies, keys: list[str], interval: float, after: float = 0.0
) -> None:
    """Each key expected, put (its put takes 0 to 30 ms) and awaited, one every 0 to 60 ms (a
    phase of its own against the beats), while the batcher writes their replies on the beats
    (`after` them)."""
    batcher = OnBeats(table, interval, after)
    writing = asyncio.create_task(batcher.run(len(keys)))
    waiters = []
    for key in keys:
        table.expect(key)
        await asyncio.sleep(random.uniform(0, 0.03))  # the put
        batcher.put.append((time.time(), key))
        waiters.append(asyncio.create_task(table.wait(key, 10)))
        await asyncio.sleep(random.uniform(0, 0.06))
    assert [r.key for r in await asyncio.gather(*waiters)] == keys
    await writing


@pytest.mark.parametrize("kind", ["own", "frame"])
async def test_dynamodb_a_reply_is_read_once_at_its_beat_and_an_edge_reads_once_a_beat(
    aws: tuple[Settings, Any], kind: str
) -> None:
    """A Lambda container's own items (BatchGetItem) and a server edge's frame items (Query):
    a key is read about once, and an edge reads at most once a beat, counted, not timed. The
    edge is made as the Lambda handler and the server make it (`aws_ports`), with REPLY_LAG_MS
    100 (40 by default, which `numerator bench` measures): this tests the beats, and a busy
    machine's writes may take that long. Polled from the put (the schedule beats replaced), a
    key was read 1.5 to 2 times, and an edge at every tick."""
    settings = aws[0].but(read_interval_ms=200.0, back_frame_ms=10.0, reply_lag_ms=100.0)
    metrics = Metrics()
    table = aws_ports(settings, metrics, aws[1]).replies
    keys = [f"0123456789abcdef-{i}" for i in range(40)] if kind == "own" else keys_of(EDGE, 40)
    began = time.time()
    await requests_on_beats(table, keys, 0.2)
    spanned = (time.time() - began) / 0.2 + 1  # beats the run spanned, the first one's too
    items, calls = metrics.reply_items.values, metrics.aws_calls.values
    if kind == "own":
        assert items["read"] <= 1.1 * len(keys), items
        assert calls["batch_get_item"] <= spanned, (calls, spanned)
    else:
        assert calls["query"] <= spanned, (calls, spanned)


@pytest.mark.parametrize(
    "kind",
    ["own", pytest.param("frame", marks=pytest.mark.slow)],  # frame: 100 keys, 5 s
)
async def test_dynamodb_an_edge_learns_when_replies_are_written(
    aws: tuple[Settings, Any], kind: str
) -> None:
    """Replies written 40 ms after their beat, and an edge whose first guess is 90 ms: it
    learns from the items' written times to read them sooner, and reads a key about once (an
    edge's items once a beat) all the same. A fixed lag would wait the 90 ms for every one."""
    settings = aws[0].but(read_interval_ms=200.0, back_frame_ms=10.0, reply_lag_ms=80.0)
    metrics = Metrics()
    table = aws_ports(settings, metrics, aws[1]).replies
    assert isinstance(table, DynamoReplies) and table.lag() == pytest.approx(0.09)
    # a server edge learns from an item a beat, not from each reply in it: more keys
    keys = [f"0123456789abcdef-{i}" for i in range(40)] if kind == "own" else keys_of(EDGE, 100)
    began = time.time()
    await requests_on_beats(table, keys, 0.2, after=0.04)
    spanned = (time.time() - began) / 0.2 + 1  # beats the run spanned, the first one's too
    learned = table.lag()
    # the publish begins 40 ms after the beat (an event loop's timer up to a few ms late), and
    # the write takes what it takes on this machine, a mean of it being in the written time
    assert 0.04 < table.lags.mean < 0.04 + 0.01 + table.writes.mean * 3, vars(table.lags)
    assert learned < 0.08, vars(table.lags)
    assert metrics.reply_lag_seconds.value == pytest.approx(learned)
    found = metrics.reply_found_seconds
    assert found.count >= (len(keys) if kind == "own" else 10), found.count
    if kind == "own":
        assert metrics.reply_items.values["read"] <= 1.1 * len(keys), metrics.reply_items.values
    else:
        assert metrics.aws_calls.values["query"] <= spanned, (metrics.aws_calls.values, spanned)


async def test_dynamodb_an_edge_whose_first_guess_is_too_short_learns_to_read_later(
    aws: tuple[Settings, Any],
) -> None:
    """REPLY_LAG_MS 0 (a first guess of 10 ms) against replies written 60 ms after their beat:
    at first every read is in vain and the reply is found a beat later, but the edge learns
    when they are written and reads once a key after that, instead of twice a key for ever.
    An outside tester found the lag held at a too-short setting doubling the p50."""
    settings = aws[0].but(read_interval_ms=200.0, back_frame_ms=10.0, reply_lag_ms=0.0)
    metrics = Metrics()
    table = aws_ports(settings, metrics, aws[1]).replies
    assert isinstance(table, DynamoReplies) and table.lag() == pytest.approx(0.01)
    first = [f"0123456789abcdef-a{i}" for i in range(10)]
    await requests_on_beats(table, first, 0.2, after=0.06)
    assert table.lag() > 0.06, vars(table.lags)
    before = metrics.reply_items.values["read"]
    later = [f"0123456789abcdef-b{i}" for i in range(30)]
    await requests_on_beats(table, later, 0.2, after=0.06)
    read = metrics.reply_items.values["read"] - before
    assert read <= 1.2 * len(later), (read, vars(table.lags))
