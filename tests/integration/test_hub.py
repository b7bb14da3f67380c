"""Two tiers on one machine (infra/adapters/hub.py): HTTP workers hand their front frames to the
machine's batcher over a real unix socket. A worker's records reach the batcher's stream (or are
refused whole), each reply goes back to the worker whose edge made its key, a batcher that dies
fails the replies awaited and is met again when it comes back, and a message too long for the
protocol closes its connection without harming the batcher."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import date
from pathlib import Path

import psycopg
import pytest

from infra.adapters import hub as hub_module
from infra.adapters.hub import HELLO, MAX_MESSAGE, PONG, Hub, HubStream
from infra.adapters.memory import MemoryReplies, MemoryStream
from infra.adapters.postgres import PostgresStore
from infra.counters import Counter
from infra.errors import ReplyTimeout, StreamFull, Unavailable
from infra.observe.metrics import Metrics
from infra.settings import Settings
from infra.wire import Cancel, Record, Reply, ReplyError, new_edge
from numerator.stack import HubEdgeStack, HubStack
from tests.asgi import asgi_client
from tests.checks import until
from tests.front import burst, values

PATIENCE = 5.0
PONG_MESSAGE = struct.pack(">I", 1) + PONG  # the batcher's answer to a PING, saying no trouble


@asynccontextmanager
async def hub_at(path: str, stream: MemoryStream | None = None) -> AsyncIterator[Hub]:
    """The batcher's side of the socket, its records on `stream`."""
    hub = Hub(path, MemoryStream() if stream is None else stream, Metrics())
    await hub.open()
    try:
        yield hub
    finally:
        hub.close()


class Worker:
    """A worker's side: a HubStream under an edge id of its own, with what `lost` was told."""

    def __init__(self, path: str) -> None:
        self.edge = new_edge()  # one process plays several workers: each its own edge
        self.lost: list[tuple[int, int]] = []  # (replies owed, puts not taken) each time
        self.replies = MemoryReplies(Metrics())
        self.stream = HubStream(path, self.replies, lambda *owed: self.lost.append(owed))
        self.count = 0

    def key(self) -> str:
        """A reply key this worker's edge made (reply_key() names the last edge drawn)."""
        self.count += 1
        return f"{self.edge}-{self.count}"

    async def met(self, hub: Hub) -> None:
        """Connected, and the hub has read this worker's HELLO."""
        await asyncio.wait_for(self.stream.connected.wait(), PATIENCE)
        await until(lambda: hub.edges.get(self.edge) is not None, PATIENCE)


@asynccontextmanager
async def worker_at(path: str, listening: bool = True) -> AsyncIterator[Worker]:
    """A worker on `path`; connected before the next worker draws its edge when a hub is
    `listening` there (its HELLO names the process's edge at the moment it connects)."""
    worker = Worker(path)
    await worker.stream.open()
    if listening:
        await asyncio.wait_for(worker.stream.connected.wait(), PATIENCE)
    try:
        yield worker
    finally:
        await worker.stream.close()


@asynccontextmanager
async def mute_at(
    path: str, held: list[asyncio.StreamWriter], answer: bool = False
) -> AsyncIterator[None]:
    """A listener on `path` that takes connections and never reads them (a dying batcher's
    backlog; with `answer`, a batcher that answered the first PING and then froze)."""

    async def taken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        if answer:
            writer.write(PONG_MESSAGE)

    server = await asyncio.start_unix_server(taken, path)
    try:
        yield
    finally:
        server.close()
        for writer in held:
            writer.close()
        await server.wait_closed()


def ok(key: str, first: int = 1, last: int = 1) -> Reply:
    return Reply(key, "c", first, last, day=date.today())


async def test_a_workers_records_reach_the_hubs_stream_and_its_put_returns_once_taken(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "hub.sock")
    memory = MemoryStream()
    async with hub_at(path, memory) as hub, worker_at(path) as worker:
        await worker.met(hub)
        records = [Record(worker.key(), "a", 2), Record(worker.key(), "b", who="key:k1")]
        await worker.stream.put(records)
        assert len(memory) == 2, "put returns once the batcher's side has taken the records"
        entries = await memory.read(memory.shard, None, 10, 0)
    assert [entry.record for entry in entries] == records


async def test_a_hub_at_capacity_refuses_the_put_whole_with_stream_full(tmp_path: Path) -> None:
    path = str(tmp_path / "hub.sock")
    memory = MemoryStream(capacity=2)
    async with hub_at(path, memory) as hub, worker_at(path) as worker:
        await worker.met(hub)
        with pytest.raises(StreamFull):
            await worker.stream.put([Record(worker.key(), "c") for _ in range(3)])
        assert len(memory) == 0, "a refused put puts none of its records"
        await worker.stream.put([Record(worker.key(), "c") for _ in range(2)])
        assert len(memory) == 2, "the link serves on after a refusal"


async def test_replies_go_to_the_worker_whose_edge_made_their_keys(tmp_path: Path) -> None:
    path = str(tmp_path / "hub.sock")
    async with hub_at(path) as hub, worker_at(path) as one, worker_at(path) as two:
        await one.met(hub)
        await two.met(hub)
        keys = {one: one.key(), two: two.key()}
        for worker, key in keys.items():
            worker.replies.expect(key)
        await hub.publish([ok(keys[two], 7, 9), ok(keys[one], 1, 6)])
        got = {w: await w.replies.wait(k, PATIENCE) for w, k in keys.items()}
    assert (got[one].key, got[one].first, got[one].last) == (keys[one], 1, 6)
    assert (got[two].key, got[two].first, got[two].last) == (keys[two], 7, 9)
    # A reply sent to the wrong worker would be counted there as abandoned (no one awaits it).
    assert one.replies.metrics.replies_abandoned.value == 0
    assert two.replies.metrics.replies_abandoned.value == 0
    assert hub.metrics.replies_abandoned.value == 0


async def test_an_ok_reply_for_an_edge_not_connected_is_counted_abandoned(tmp_path: Path) -> None:
    path = str(tmp_path / "hub.sock")
    async with hub_at(path) as hub:
        gone = "0123456789abcdef"
        refused = Reply(f"{gone}-2", "c", error=ReplyError.COUNTER_NOT_FOUND, detail="no c")
        await hub.publish([ok(f"{gone}-1"), refused, ok(f"{gone}-3", 4, 8)])
    assert hub.metrics.replies_abandoned.value == 2, "the ok replies held values; the error none"


async def test_a_batcher_that_dies_fails_the_replies_awaited_and_is_met_again_when_back(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "hub.sock")
    async with worker_at(path, listening=False) as worker:
        async with hub_at(path) as first:
            await worker.met(first)
            keys = [worker.key() for _ in range(3)]
            for key in keys:
                worker.replies.expect(key)
            waits = [asyncio.create_task(worker.replies.wait(k, 60)) for k in keys]
            await asyncio.sleep(0)
        # The batcher's side closed: each wait fails now, not after its 60 s.
        failed = await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), PATIENCE)
        assert [type(e) for e in failed] == [ReplyTimeout] * 3, failed
        await until(lambda: worker.lost == [(3, 0)], PATIENCE)
        assert not worker.stream.connected.is_set()
        with pytest.raises(Unavailable):
            await worker.stream.put([Record(worker.key(), "c")])
        memory = MemoryStream()
        async with hub_at(path, memory) as second:
            await worker.met(second)  # reconnected by itself, on the same path
            await worker.stream.put([Record(worker.key(), "c")])
            assert len(memory) == 1
    assert worker.lost == [(3, 0)], "only the batcher's going is a loss"


async def test_a_worker_that_closes_its_stream_is_not_lost_and_leaves_the_hub(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "hub.sock")
    async with hub_at(path) as hub:
        async with worker_at(path) as worker:
            await worker.met(hub)
            key = worker.key()
            worker.replies.expect(key)
            wait = asyncio.create_task(worker.replies.wait(key, 60))
            await asyncio.sleep(0)
        with pytest.raises(ReplyTimeout):
            await asyncio.wait_for(wait, PATIENCE)
        assert worker.lost == [], "a worker that stops does not take itself for lost"
        # Its connection ends: the hub forgets its edge, and counts a late reply abandoned.
        await until(lambda: worker.edge not in hub.edges, PATIENCE)
        await hub.publish([ok(key)])
    assert hub.metrics.replies_abandoned.value == 1


async def test_a_message_longer_than_max_message_closes_its_connection_not_the_hub(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "hub.sock")
    memory = MemoryStream()
    async with hub_at(path, memory) as hub:
        reader, writer = await asyncio.open_unix_connection(path)
        hello = b"fedcba9876543210"
        writer.write(struct.pack(">I", len(hello) + 1) + HELLO + hello)
        await until(lambda: hello.decode() in hub.edges, PATIENCE)
        writer.write(struct.pack(">I", MAX_MESSAGE + 1) + b"P")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), PATIENCE) == b"", "the hub hung up"
        writer.close()
        await writer.wait_closed()
        await until(lambda: hello.decode() not in hub.edges, PATIENCE)
        async with worker_at(path) as worker:  # the hub serves on
            await worker.met(hub)
            await worker.stream.put([Record(worker.key(), "c")])
        assert len(memory) == 1


async def test_a_hub_stack_hands_a_workers_requests_unique_increasing_values(
    tmp_path: Path, settings: Settings, name: str
) -> None:
    own = settings.but(hub=str(tmp_path / "hub.sock"))
    async with (
        HubStack(own) as batcher,
        HubEdgeStack(own) as worker,
        asgi_client(worker.app()) as client,
    ):
        assert (await client.post("/counters", json={"name": name})).status_code == 201
        together = await burst(client, name, 20)
        one_by_one = [await client.post(f"/counters/{name}/next") for _ in range(5)]
        health = (await client.get("/healthz")).json()
    assert [r.status_code for r in together + one_by_one] == [200] * 25
    assert sorted(values(together)) == list(range(1, 21))
    assert values(one_by_one) == list(range(21, 26))
    assert worker.metrics.records_put.value < 20, "the worker's front frames gathered requests"
    assert batcher.metrics.frames_committed.value >= 1
    assert health["batcher"] == "ok", health


async def test_records_of_several_workers_arriving_together_share_one_frame(
    tmp_path: Path, settings: Settings, name: str, store: PostgresStore, database_url: str
) -> None:
    path = str(tmp_path / "hub.sock")
    own = settings.but(hub=path, frame_policy="fixed", back_frame_ms=300.0)
    await store.create(Counter(name))
    async with HubStack(own) as batcher, worker_at(path) as one, worker_at(path) as two:
        await one.met(batcher.hub)
        await two.met(batcher.hub)
        keys = {one: one.key(), two: two.key()}
        for worker, key in keys.items():
            worker.replies.expect(key)
        await asyncio.gather(
            *(w.stream.put([Record(k, name, 2)]) for w, k in keys.items()),
        )
        got = [await w.replies.wait(k, PATIENCE) for w, k in keys.items()]
    assert sorted((r.first, r.last) for r in got) == [(1, 2), (3, 4)]
    async with await psycopg.AsyncConnection.connect(database_url) as sql:
        cursor = await sql.execute(
            "SELECT count(DISTINCT frame) FROM allocations WHERE counter = %s", (name,)
        )
        row = await cursor.fetchone()
    assert row == (1,), "both workers' records went to Postgres in one frame"


async def test_a_frame_waits_for_a_put_of_each_busy_worker_and_no_longer_than_back_frame_ms(
    tmp_path: Path,
    settings: Settings,
    name: str,
    store: PostgresStore,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the default (auto) frame policy the machine's batcher holds a frame until each worker
    that put lately has put since the last frame (`Hub.round`): two workers' front frames 0.2 s
    apart share one transaction, where without the round the first would have gone alone at
    once. A worker that stops putting is waited for no longer than BACK_FRAME_MS."""
    monkeypatch.setattr(hub_module, "ROUND_S", 5.0)  # "lately": however slow this machine is
    path = str(tmp_path / "hub.sock")
    own = settings.but(hub=path, back_frame_ms=2000.0)
    held = name + "-held"
    for counter in (name, held):
        await store.create(Counter(counter))

    async def take(worker: Worker, counter: str) -> Reply:
        key = worker.key()
        worker.replies.expect(key)
        await worker.stream.put([Record(key, counter)])
        return await worker.replies.wait(key, PATIENCE)

    async with HubStack(own) as batcher, worker_at(path) as one, worker_at(path) as two:
        await one.met(batcher.hub)
        await two.met(batcher.hub)
        await asyncio.gather(take(one, name), take(two, name))  # both busy now
        first = asyncio.create_task(take(one, held))
        await asyncio.sleep(0.2)
        assert not first.done(), "the frame waits for the other busy worker's put"
        second = await take(two, held)
        assert (await first).first + second.first == 1 + 2
        began = asyncio.get_running_loop().time()
        alone = await take(one, held)  # worker two puts nothing more: waited for at most 2 s
        waited = asyncio.get_running_loop().time() - began
    assert alone.first == 3 and 1.5 < waited < 2 + PATIENCE, waited
    async with await psycopg.AsyncConnection.connect(database_url) as sql:
        cursor = await sql.execute(
            "SELECT count(DISTINCT frame) FROM allocations WHERE counter = %s", (held,)
        )
        row = await cursor.fetchone()
    assert row == (2,), "the two workers' records in one frame, the lone one in another"


async def test_a_frozen_batcher_counts_a_put_as_taken_and_turns_its_workers_unwell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batcher that stops reading (SIGSTOP) neither hangs a put (it counts as put after
    TAKEN_S, and its reply's timeout runs on) nor leaves /healthz green (SILENT_S); a cancel
    still goes when a record would not, for it may be what voids values already taken."""
    monkeypatch.setattr(hub_module, "TAKEN_S", 0.2)
    monkeypatch.setattr(hub_module, "PING_S", 0.05)
    monkeypatch.setattr(hub_module, "SILENT_S", 0.3)
    path = str(tmp_path / "hub.sock")
    held: list[asyncio.StreamWriter] = []
    async with mute_at(path, held, answer=True), worker_at(path) as worker:
        assert worker.stream.unwell() is None
        began = asyncio.get_running_loop().time()
        await asyncio.wait_for(worker.stream.put([Record(worker.key(), "c")]), PATIENCE)
        assert asyncio.get_running_loop().time() - began >= 0.2
        await until(lambda: worker.stream.unwell() is not None, PATIENCE)
        assert "has not answered" in str(worker.stream.unwell())
        # Its buffer over BUFFERED (-1 here): a record is refused, a cancel still goes.
        monkeypatch.setattr(hub_module, "BUFFERED", -1)
        with pytest.raises(StreamFull):
            await worker.stream.put([Record(worker.key(), "c")])
        await worker.stream.put([Cancel(worker.key(), "c", None, "")])


async def test_the_batchers_trouble_reaches_its_workers_health(tmp_path: Path) -> None:
    path = str(tmp_path / "hub.sock")
    trouble = ["retrying: c"]
    hub = Hub(path, MemoryStream(), Metrics(), lambda: trouble[0])
    await hub.open()
    try:
        async with worker_at(path) as worker:
            await until(lambda: worker.stream.unwell() == "retrying: c", PATIENCE)
            trouble[0] = ""
            await until(lambda: worker.stream.unwell() is None, PATIENCE)
    finally:
        hub.close()
    await until(lambda: worker.stream.unwell() is not None, PATIENCE)


async def test_a_connection_that_ends_with_nothing_in_doubt_is_no_loss(tmp_path: Path) -> None:
    """A dying batcher's listener may take one last connection before it closes: its end,
    with no record put on it, does not make the worker a new edge again."""
    path = str(tmp_path / "hub.sock")
    async with hub_at(path) as hub, worker_at(path) as worker:
        await worker.met(hub)
        await worker.stream.put([Record(worker.key(), "c")])  # taken, and no reply awaited
        first = hub.edges[worker.edge]
        first.close()
        # met again, under the same edge: its HELLO names the edge it still is
        await until(lambda: hub.edges.get(worker.edge) not in (None, first), PATIENCE)
        assert worker.lost == []


async def test_a_listener_that_never_answers_is_put_nothing_and_its_end_is_no_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dying batcher's listener may take connections for a moment after its workers' links
    ended: a worker puts nothing on one until the batcher answers its PING, so its end costs
    the worker no second edge (the values issued to it listed unsure twice)."""
    monkeypatch.setattr(hub_module, "SILENT_S", 0.3)
    path = str(tmp_path / "hub.sock")
    held: list[asyncio.StreamWriter] = []
    async with mute_at(path, held), worker_at(path, listening=False) as worker:
        await until(lambda: bool(held), PATIENCE)
        key = worker.key()
        worker.replies.expect(key)
        with pytest.raises(Unavailable, match="not reachable"):
            await worker.stream.put([Record(key, "c")])
        worker.replies.forget(key)
        for writer in held:  # the listener goes, and its connection with it
            writer.close()
        await asyncio.sleep(0.5)
        assert not worker.stream.connected.is_set()
        assert worker.lost == [], "a connection nothing was put on is no loss"


async def test_a_batcher_lost_tells_the_replies_owed_and_the_puts_not_taken_apart(
    tmp_path: Path,
) -> None:
    """What the worker says it lost: a reply awaited (its request answered 504) and a put the
    batcher had not said it took (answered 503, its record not counted among the replies)."""
    path = str(tmp_path / "hub.sock")
    held: list[asyncio.StreamWriter] = []
    async with mute_at(path, held, answer=True), worker_at(path) as worker:
        awaited, untaken = worker.key(), worker.key()
        for key in (awaited, untaken):
            worker.replies.expect(key)
        wait = asyncio.create_task(worker.replies.wait(awaited, 60))
        put = asyncio.create_task(worker.stream.put([Record(untaken, "c")]))
        await asyncio.sleep(0.1)  # the put is in the socket, its TAKEN never comes
        for writer in held:
            writer.close()
        with pytest.raises(ReplyTimeout):
            await asyncio.wait_for(wait, PATIENCE)
        with pytest.raises(Unavailable):
            await asyncio.wait_for(put, PATIENCE)
        await until(lambda: worker.lost == [(1, 1)], PATIENCE)


async def test_a_put_as_the_batchers_link_closes_is_unavailable_not_stream_full(
    tmp_path: Path,
) -> None:
    """The moment the batcher goes (its link closing, its end told a turn of the loop later),
    a put is refused as unavailable, not as a saturated batcher's."""
    path = str(tmp_path / "hub.sock")
    async with hub_at(path) as hub, worker_at(path) as worker:
        await worker.met(hub)
        link = worker.stream._link
        assert link is not None
        link.close()
        with pytest.raises(Unavailable, match="went away"):
            await worker.stream.put([Record(worker.key(), "c")])
