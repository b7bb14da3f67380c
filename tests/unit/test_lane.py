"""The lane (functions/lane.py): a counter's plain /next of one turn of the loop as one record,
its reply's range handed out in the order they came; a request that leaves costs no number, or
its value is voided, and a record all of whose requests left is given up whole."""

from __future__ import annotations

import asyncio
from datetime import date
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.types import Message

from functions.app import create_app
from functions.edge import Edge
from functions.lane import Lane, runs
from infra.adapters.memory import MemoryReplies, MemoryStream
from infra.errors import ReplyTimeout
from infra.observe.metrics import Metrics
from infra.settings import Settings
from infra.wire import Record, Reply, ReplyError, Void
from tests.asgi import next_scope

DAY = date(2026, 12, 5)


class Batcher:
    """What the lane's records are put to: each record kept, answered when told."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.answers: dict[str, asyncio.Future[Reply]] = {}
        self.cancelled: list[str] = []
        self.next = 1

    async def deliver(self, record: Record, timeout: float) -> Reply:
        self.records.append(record)
        answer: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.answers[record.key] = answer
        try:
            return await answer
        except asyncio.CancelledError:
            self.cancelled.append(record.key)
            raise

    def answer(self, record: Record) -> None:
        first, self.next = self.next, self.next + record.count
        reply = Reply(record.key, record.counter, first, first + record.count - 1, "{value}", DAY)
        self.answers[record.key].set_result(reply)


class Voided(list[tuple[Any, ...]]):
    """The voids the lane asked for: (counter, first, last, day, who) each."""


def lane(batcher: Batcher, voided: Voided) -> Lane:
    async def abandon(*void: Any) -> None:
        voided.append(void)

    return Lane(batcher.deliver, lambda: 5.0, lambda t: t - 0.5, abandon)


async def turn() -> None:
    """Let the loop run its ready callbacks (a gathering closes on the next turn)."""
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_counters_requests_of_one_turn_are_one_record_their_values_in_order() -> None:
    batcher, voided = Batcher(), Voided()
    gathered = lane(batcher, voided)
    inv = [gathered.take("inv", "a"), gathered.take("inv", "a"), gathered.take("inv", "b")]
    other = gathered.take("po", "a")
    await turn()
    assert [(r.counter, r.count, r.who) for r in batcher.records] == [
        ("inv", 3, [[2, "a"], [1, "b"]]),
        ("po", 1, [[1, "a"]]),
    ]
    assert batcher.records[0].idempotency_key is None and batcher.records[0].deadline > 0
    for record in batcher.records:
        batcher.answer(record)
    assert [(await f)[1] for f in inv] == [1, 2, 3]
    assert (await other)[1] == 4
    later = gathered.take("inv", "a")  # the next turn: a record of its own
    await turn()
    batcher.answer(batcher.records[-1])
    assert (await later)[1] == 5 and len(batcher.records) == 3
    assert voided == []


async def test_one_that_leaves_before_its_turn_ends_costs_no_number() -> None:
    batcher, voided = Batcher(), Voided()
    gathered = lane(batcher, voided)
    staying, leaving = gathered.take("inv", "a"), gathered.take("inv", "b")
    leaving.cancel()
    gathered.gone("inv", leaving, "b")
    await turn()
    assert [(r.count, r.who) for r in batcher.records] == [(1, [[1, "a"]])]
    batcher.answer(batcher.records[0])
    assert (await staying)[1] == 1 and voided == []


async def test_values_of_those_that_left_after_their_record_went_are_voided() -> None:
    batcher, voided = Batcher(), Voided()
    gathered = lane(batcher, voided)
    takers = [gathered.take("inv", who) for who in ("a", "b", "b", "c")]
    await turn()
    for at in (1, 2):  # b's two requests leave while the record is out
        takers[at].cancel()
        gathered.gone("inv", takers[at], "b")
    assert batcher.cancelled == []  # the others still wait: the record is not given up
    batcher.answer(batcher.records[0])
    assert [(await takers[at])[1] for at in (0, 3)] == [1, 4]
    await turn()
    assert voided == [("inv", 2, 3, DAY, "b")]  # adjacent values of one sender, one void


async def test_a_record_all_of_whose_requests_left_is_given_up_whole() -> None:
    """As a lone request's record is: its wait cancelled (the edge then cancels it on the
    stream: never allocated, or void), no value of it voided one by one."""
    batcher, voided = Batcher(), Voided()
    gathered = lane(batcher, voided)
    takers = [gathered.take("inv", "a"), gathered.take("inv", "a")]
    await turn()
    for taker in takers:
        taker.cancel()
        gathered.gone("inv", taker, "a")
    await turn()
    assert batcher.cancelled == [batcher.records[0].key]
    assert voided == [] and gathered.sending == {}


async def test_a_value_that_came_as_its_client_left_is_voided() -> None:
    batcher, voided = Batcher(), Voided()
    gathered = lane(batcher, voided)
    taker = gathered.take("inv", "a")
    await turn()
    batcher.answer(batcher.records[0])
    await turn()
    assert taker.done()
    gathered.gone("inv", taker, "a")  # its client was known gone as the value came
    await turn()
    assert voided == [("inv", 1, 1, DAY, "a")]


async def test_an_error_or_a_failed_wait_reaches_every_request_of_the_record() -> None:
    batcher, voided = Batcher(), Voided()
    gathered = lane(batcher, voided)
    takers = [gathered.take("inv", "a"), gathered.take("inv", "b")]
    await turn()
    record = batcher.records[0]
    refused = Reply(
        record.key, "inv", error=ReplyError.COUNTER_NOT_FOUND, detail="no counter 'inv'"
    )
    batcher.answers[record.key].set_result(refused)
    assert [(await t)[0].error for t in takers] == [ReplyError.COUNTER_NOT_FOUND] * 2
    late = [gathered.take("inv", "a"), gathered.take("inv", "a")]
    await turn()
    batcher.answers[batcher.records[1].key].set_exception(ReplyTimeout("no reply within 5s"))
    for taker in late:
        with pytest.raises(ReplyTimeout):
            await taker
    assert voided == []


def test_runs_say_who_asked_in_the_order_values_are_handed_out() -> None:
    loop = asyncio.new_event_loop()
    try:
        takers = [(loop.create_future(), who) for who in ("a", "a", "b", "a")]
        assert runs(takers) == [[2, "a"], [1, "b"], [1, "a"]]
    finally:
        loop.close()


async def test_through_the_edge_a_client_known_gone_as_its_value_comes_gets_it_voided() -> None:
    """granian completes receive()'s future as it reads a client's leaving and runs the watch's
    callback (which cancels the request) a turn of the loop later: a value that comes in
    between is voided, not sent to a closed connection — the watch is asked before the
    request stops being watched."""
    stream, replies, metrics = MemoryStream(), MemoryReplies(), Metrics()
    store: Any = SimpleNamespace(ping=None)  # the edge asks nothing of its store here
    edge = Edge(stream, replies, store, Settings.from_env({"AUTH": "none"}), metrics, lane=True)
    fast = create_app(edge)
    leaving: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
    sent: list[Message] = []

    def receive() -> asyncio.Future[Message]:  # granian's receive() returns a future
        return leaving

    async def send(message: Message) -> None:
        sent.append(message)

    scope = next_scope("/counters/inv/next")
    request = asyncio.create_task(fast(scope, receive, send))
    [entry] = await stream.read(stream.shard, None, 10, 5.0)
    assert isinstance(entry.record, Record) and entry.record.count == 1
    fast.watch.sweep()  # young → old
    fast.watch.sweep()  # old: watched, its callback on `leaving`
    lane = fast.lane
    assert lane is not None
    handing = lane._hand_out

    def hand_out(reply: Reply, takers: Any) -> None:  # the client leaves as its value comes
        handing(reply, takers)
        leaving.set_result({"type": "http.disconnect"})

    lane._hand_out = hand_out  # type: ignore[method-assign]
    await replies.publish([Reply(entry.record.key, "inv", 7, 7, "{value}", DAY)])
    await request
    assert sent == [], "nothing is sent to a client that is gone"
    [void] = await stream.read(stream.shard, entry.sequence, 10, 5.0)
    assert isinstance(void.record, Void)
    assert (void.record.first, void.record.last, void.record.who) == (7, 7, "127.0.0.1")
    assert metrics.clients_gone.value == 1


@pytest.mark.parametrize("front_frame_ms", [0.0, 20.0])
def test_the_lane_is_an_embedded_and_a_two_tier_worker_edges_unless_front_frames_are_off(
    front_frame_ms: float,
) -> None:
    """One worker (EmbeddedStack) and two tiers' workers (HubEdgeStack) take plain /next through
    the lane; FRONT_FRAME_MS=0 turns it off for both (a record a request)."""
    from numerator.stack import EmbeddedStack, HubEdgeStack

    settings = Settings.from_env(
        {"HUB": "/tmp/numerator-test.sock", "DATABASE_URL": "postgresql://nobody@localhost/none"}
    ).but(front_frame_ms=front_frame_ms)
    for stack in (EmbeddedStack, HubEdgeStack):
        assert stack(settings).edge.lane is (front_frame_ms > 0), stack.__name__
