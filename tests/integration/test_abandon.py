"""Cancel before it costs a number: when an edge gives up on a request (its client went away,
its reply timed out), a record not yet applied allocates nothing, and the values of one already
applied become void, `abandoned`. On every path: embedded, the server edge with front frames
(some of a frame's requests gone), and the Lambda handler."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from infra.wire import Record, reply_key
from numerator.stack import BatcherStack, EdgeStack, EmbeddedStack
from tests.asgi import asgi_client, next_scope
from tests.checks import until


async def report(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    answer = await client.get(f"/counters/{name}/report")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def leave_after(app: Any, path: str, seconds: float) -> list[dict[str, Any]]:
    """POST `path` as a client that hangs up after `seconds`; what the app sent it."""
    sent: list[dict[str, Any]] = []
    told = False

    async def receive() -> dict[str, Any]:
        nonlocal told
        if not told:
            told = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(seconds)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = next_scope(path)
    await app(scope, receive, send)
    return sent


async def test_a_client_gone_before_its_frame_costs_no_number(
    settings: Settings, name: str
) -> None:
    """Embedded, fixed frames of 300 ms: the client hangs up 50 ms in, before its frame closes;
    the cancel reaches the same frame, and the record allocates nothing."""
    slow = settings.but(frame_policy="fixed", back_frame_ms=300.0)
    async with EmbeddedStack(slow) as stack:
        app = stack.app()
        async with asgi_client(app) as client:
            await client.post("/counters", json={"name": name})
            said = await leave_after(app, f"/counters/{name}/next", 0.05)
            assert said == [], "nothing is sent to a client that is gone"
            await asyncio.sleep(0.5)
            after = (await client.post(f"/counters/{name}/next")).json()
            found = await report(client, name)
    assert after["value"] == 1, "no number was spent on the request that went away"
    assert found["issued"] == 1 and found["unexplained_gaps"] == 0 and found["voided"] == {}
    assert stack.metrics.records_cancelled.value == 1 and stack.metrics.clients_gone.value == 1


async def test_a_record_applied_before_its_cancel_is_void_abandoned(
    settings: Settings, name: str
) -> None:
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name})
        await client.post(f"/counters/{name}/next")
        record = Record(reply_key(), name, 3, who="key:gone")
        stack.replies.expect(record.key)
        await stack.stream.put([record])
        reply = await stack.replies.wait(record.key, 5)
        assert (reply.first, reply.last) == (2, 4)
        await stack.edge.give_up(record)  # as if its client had gone right then

        async def voided() -> bool:
            return (await report(client, name))["voided"] == {"abandoned": 3}

        await until(voided, within=5)
        found = await report(client, name)
        exported = (await client.get(f"/counters/{name}/audit")).json()["rows"]
    assert found["issued"] == 4 and found["delivered"] == 1 and found["unexplained_gaps"] == 0
    assert [(v["first"], v["last"], v["who"]) for v in found["voids"]] == [(2, 4, "key:gone")]
    assert [r["status"] for r in exported] == ["issued", "issued", "void"]
    assert stack.metrics.values_abandoned.value == 3


@pytest.mark.slow  # 3-5 s: the fast lane's budget (docs/testing.md)
async def test_a_front_frame_with_some_requests_gone_voids_only_theirs(
    aws: tuple[Settings, Any], name: str
) -> None:
    settings, _ = aws
    slow = settings.but(front_frame_ms=100.0)
    # The batcher reads its shard once a second: the requests go between the put and the reply.
    async with (
        BatcherStack(slow.but(read_interval_ms=1000.0)),
        EdgeStack(slow) as edge,
        asgi_client(edge.app()) as client,
    ):
        await client.post("/counters", json={"name": name})
        front = edge.edge.front
        assert front is not None
        takes = [asyncio.create_task(front.take(name, 1, 10, f"key:{i}")) for i in range(5)]
        put = edge.metrics.records_put.value

        async def sent() -> bool:
            return edge.metrics.records_put.value > put

        await until(sent, within=5)  # the front frame went out as one record
        for task in takes[1:3]:  # two of its requests go away before the reply comes
            task.cancel()
        kept = [await task for task in (takes[0], *takes[3:])]
        assert all(reply.error is None for reply in kept)

        async def voided() -> bool:
            return (await report(client, name))["voided"] == {"abandoned": 2}

        await until(voided, within=10)
        found = await report(client, name)
    assert found["issued"] == 5 and found["unexplained_gaps"] == 0 and found["delivered"] == 3
    assert {v["who"] for v in found["voids"]} == {"key:1", "key:2"}
    assert sorted(r.first for r in kept) == [1, 4, 5]


async def test_a_lambda_request_that_times_out_is_cancelled(
    aws: tuple[Settings, Any], name: str
) -> None:
    """The Lambda handler with no batcher running: the request times out within the
    invocation, its cancel follows its record on the stream, and the batcher that starts later
    allocates nothing for it (the record is past its deadline; had it been applied, the cancel
    would void its values)."""
    from tests.lambdas import Container, environment, event

    settings, _ = aws
    quick = settings.but(reply_timeout_s=1.0)
    lam = Container(environment(quick))
    try:
        async with (  # for creating the counter and reading the report
            EmbeddedStack(quick) as local,
            asgi_client(local.app()) as client,
        ):
            await client.post("/counters", json={"name": name})
            began = time.monotonic()
            answer = await asyncio.to_thread(lam, event("http-api-next.json", name))
            assert answer["statusCode"] == 504, answer
            assert time.monotonic() - began < 3
            async with BatcherStack(quick) as batcher:
                await until(lambda: batcher.metrics.records_in.value >= 2, within=10)
            found = await report(client, name)
    finally:
        lam.close()
    assert found["issued"] == 0 and found["unexplained_gaps"] == 0
    assert batcher.metrics.records_expired.value == 1, (
        "the record and its cancel: nothing allocated"
    )


async def test_a_cancel_after_a_takeover_voids_what_the_previous_owner_applied(
    aws: tuple[Settings, Any], name: str
) -> None:
    """On Kinesis the record is applied by one batcher, which then stops; its cancel reaches
    the shard's next owner, which finds what the record took in the replies the frame kept."""
    settings, _ = aws
    async with EdgeStack(settings) as edge, asgi_client(edge.app()) as client:
        await client.post("/counters", json={"name": name})
        record = Record(reply_key(), name, 2, who="key:left")
        async with BatcherStack(settings):
            edge.aws.replies.expect(record.key)
            await edge.aws.stream.put([record])
            reply = await edge.aws.replies.wait(record.key, 10)
            assert (reply.first, reply.last) == (1, 2)
        async with BatcherStack(settings) as heir:
            await edge.edge.give_up(record)
            await until(lambda: heir.metrics.values_abandoned.value == 2, within=10)
        found = await report(client, name)
    assert found["voided"] == {"abandoned": 2} and found["delivered"] == 0
    assert found["unexplained_gaps"] == 0


async def keyed(stack: EmbeddedStack, name: str, key: str, count: int = 2) -> Record:
    """A keyed request's record, put and answered; the record (its reply key names it)."""
    record = Record(reply_key(), name, count, key, who="key:k", sent=time.time())
    stack.replies.expect(record.key)
    await stack.stream.put([record])
    reply = await stack.replies.wait(record.key, 5)
    assert reply.error is None, reply
    return record


async def test_a_keyed_request_cancelled_frees_its_key_and_a_retry_takes_new_values(
    settings: Settings, name: str
) -> None:
    """Issue 28, finding 2: the first try of a keyed request is cut (its values void,
    abandoned); the retry with the same key must not be answered those void values — it takes
    new ones, and a value is either delivered or void, never both."""
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name})
        first = await keyed(stack, name, "order-1")  # values 1-2, then its client went
        await stack.edge.give_up(first)

        async def voided() -> bool:
            return (await report(client, name))["voided"] == {"abandoned": 2}

        await until(voided, within=5)
        retry = await client.post(
            f"/counters/{name}/next?count=2", headers={"Idempotency-Key": "order-1"}
        )
        again = await client.post(
            f"/counters/{name}/next?count=2", headers={"Idempotency-Key": "order-1"}
        )
        found = await report(client, name)
    assert retry.json()["first"] == 3 and again.json() == retry.json()
    assert found["voided"] == {"abandoned": 2} and found["delivered"] == 2
    assert found["unexplained_gaps"] == 0


async def test_a_cancel_that_comes_after_a_retry_was_answered_voids_nothing(
    settings: Settings, name: str
) -> None:
    """The other order: the retry was answered the key's values before the first try's cancel
    arrived; the cancel voids nothing (the values were delivered, to the retry)."""
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name})
        first = await keyed(stack, name, "order-2")
        retry = await client.post(
            f"/counters/{name}/next?count=2", headers={"Idempotency-Key": "order-2"}
        )
        await stack.edge.give_up(first)  # late: the retry holds the values now
        await client.post(f"/counters/{name}/next")  # a frame after the cancel's
        await asyncio.sleep(0.2)
        found = await report(client, name)
        cut = await keyed(stack, name, "order-2")  # the key's third try, then cut
        await stack.edge.give_up(cut)
        await client.post(f"/counters/{name}/next")
        await asyncio.sleep(0.2)
        after = await report(client, name)
    assert retry.json()["first"] == 1 and retry.json()["last"] == 2
    assert found["voided"] == {} and found["unexplained_gaps"] == 0, found
    # the retry's answer was never cancelled: the values stay delivered, whatever later tries do
    assert after["voided"] == {} and after["delivered"] == after["issued"] == 4, after


async def test_a_keyed_request_every_try_of_which_was_cancelled_is_void(
    settings: Settings, name: str
) -> None:
    """Three tries of one key, each answered the key's values and each cancelled (their
    clients went): the values are void, abandoned, once the last of them is, and the key is
    free for the next try to take new ones."""
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name})
        tries = [await keyed(stack, name, "order-5") for _ in range(3)]
        for one in tries[:2]:
            await stack.edge.give_up(one)
        await client.post(f"/counters/{name}/next")  # a frame after the cancels'
        await asyncio.sleep(0.2)
        held = await report(client, name)
        await stack.edge.give_up(tries[2])

        async def voided() -> bool:
            return (await report(client, name))["voided"] == {"abandoned": 2}

        await until(voided, within=5)
        fourth = await client.post(
            f"/counters/{name}/next?count=2", headers={"Idempotency-Key": "order-5"}
        )
    assert held["voided"] == {}, "one try still held the values"
    assert fourth.json()["first"] == 4, fourth.json()


@pytest.mark.parametrize("stamped", [-0.01, 0.01], ids=["stamped-before", "stamped-after"])
async def test_a_try_applied_after_its_own_retry_does_not_void_what_the_retry_delivered(
    settings: Settings, name: str, stamped: float
) -> None:
    """Two edges, two batchers (embedded --workers 2): a keyed try whose client was cut can be
    applied after the retry that delivered its key's values, and its worker, if busy, may have
    stamped its record (`sent`) before or after the retry's. It shares the values; its cancel
    voids nothing, the retry still holds them (the matrix found value 1114, and later 89 with
    the try stamped after, delivered and void: the values had passed to the try sent last)."""
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name})
        now = time.time()
        cut = Record(reply_key(), name, 1, "order-3", who="key:k", sent=now + stamped)
        retry = Record(reply_key(), name, 1, "order-3", who="key:k", sent=now)
        for record in (retry, cut):  # the retry is applied first
            stack.replies.expect(record.key)
            await stack.stream.put([record])
            assert (await stack.replies.wait(record.key, 5)).first == 1
        await stack.edge.give_up(cut)
        await client.post(f"/counters/{name}/next")  # a frame after the cancel's
        await asyncio.sleep(0.2)
        found = await report(client, name)
    assert found["voided"] == {} and found["delivered"] == 2, found


def fail_once(monkeypatch: Any, committed: bool) -> list[bool]:
    """A plain frame's statement fails once, as Postgres goes away: after it committed (its
    answer lost) or before it reached Postgres. The list holds True once it has."""
    from infra.adapters.postgres import PostgresStore
    from infra.errors import StoreUnavailable

    real = PostgresStore.allocate_plain
    failed: list[bool] = []

    async def once(self: PostgresStore, *args: Any) -> Any:
        if failed:
            return await real(self, *args)
        if committed:
            await real(self, *args)
        failed.append(True)
        raise StoreUnavailable("Postgres is unavailable: the connection was closed")

    monkeypatch.setattr(PostgresStore, "allocate_plain", once)
    return failed


async def test_a_frame_that_committed_as_postgres_went_away_is_not_allocated_again(
    settings: Settings, name: str, monkeypatch: Any
) -> None:
    """Postgres goes away as a frame commits: the commit took effect, its answer was lost. A
    second try allocated the record again and the first values were issued to no one (the
    matrix's embedded Postgres cell). Now the batcher finds the frame committed, voids its
    values, abandoned, and answers its record 503, for its client to ask again."""
    lost = fail_once(monkeypatch, committed=True)
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name})
        first = await client.post(f"/counters/{name}/next")
        second = await client.post(f"/counters/{name}/next")

        async def voided() -> bool:
            return (await report(client, name))["voided"] == {"abandoned": 1}

        await until(voided, within=5)
        found = await report(client, name)
    assert lost and first.status_code == 503, first.text
    assert second.json()["value"] == 2
    assert found["issued"] == 2 and found["delivered"] == 1 and found["unexplained_gaps"] == 0


async def test_records_given_up_in_an_outage_are_not_allocated_after_it(
    settings: Settings, name: str, monkeypatch: Any
) -> None:
    """Issue 51, item 8: a frame that fails to commit gives up on the records whose clients will
    have stopped waiting before its next try, answering them 'unavailable'. When that empties
    the frame, the shard is read on past it: read again from where it was, the records came back
    while still live and, Postgres back, were allocated for clients already answered 503."""
    failed = fail_once(monkeypatch, committed=False)
    async with (
        EmbeddedStack(settings.but(reply_timeout_s=0.3)) as stack,
        asgi_client(stack.app()) as client,
    ):
        await client.post("/counters", json={"name": name})
        first = await client.post(f"/counters/{name}/next")
        await asyncio.sleep(0.5)  # past the given-up record's deadline
        second = await client.post(f"/counters/{name}/next")
        found = await report(client, name)
    assert failed and first.status_code == 503, first.text
    assert second.json()["value"] == 1, "the given-up record took no value"
    assert found["issued"] == 1 and found["voided"] == {}, found


async def test_a_lost_commit_whose_records_were_given_up_is_settled_by_the_next_frame(
    settings: Settings, name: str, monkeypatch: Any
) -> None:
    """As above, but the record's client would stop waiting before the next try: the record is
    given up (answered 503) and its frame left empty, with the commit in doubt. Returning then
    left the committed values issued to no one, neither void nor delivered (seen in
    tests/e2e/test_failover.py: a primary killed as its synchronous standby confirmed a
    commit). The frame settles the doubt before it lets go: the values are void, abandoned."""
    lost = fail_once(monkeypatch, committed=True)
    async with (
        EmbeddedStack(settings.but(reply_timeout_s=0.2)) as stack,
        asgi_client(stack.app()) as client,
    ):
        await client.post("/counters", json={"name": name})
        first = await client.post(f"/counters/{name}/next")

        async def voided() -> bool:
            return (await report(client, name))["voided"] == {"abandoned": 1}

        # settled before the frame lets go of its shard: a request sent meanwhile, with
        # less than a retry's wait left, is answered 503 too (batcher/applier.py)
        await until(voided, within=5)
        second = await client.post(f"/counters/{name}/next")
        found = await report(client, name)
        rows = (await client.get(f"/counters/{name}/audit")).json()["rows"]
    assert lost and first.status_code == 503, first.text
    assert second.json()["value"] == 2, (second.text, first.text, found, rows)
    assert found["issued"] == 2 and found["delivered"] == 1 and found["unexplained_gaps"] == 0


async def test_what_a_frame_took_in_after_a_lost_commit_is_applied_on_its_own(
    settings: Settings, name: str, monkeypatch: Any
) -> None:
    """Between tries a frame takes in the records behind it (an outage of minutes answers them
    503 in time): a try whose commit was lost committed only what the frame held then. Its
    record is answered 503, its values void; a request put while it failed gets the next value
    (taken into the frame and tried on its own, or read after it), none lost, none twice."""
    from infra.adapters.postgres import PostgresStore
    from infra.errors import StoreUnavailable

    real = PostgresStore.allocate_plain
    lost: list[asyncio.Task[httpx.Response]] = []

    async def committed_then_lost(self: PostgresStore, *args: Any) -> Any:
        totals = await real(self, *args)
        if not lost:  # the second request is put as the first's commit's answer is lost
            lost.append(asyncio.create_task(client.post(f"/counters/{name}/next")))
            await asyncio.sleep(0.1)
            raise StoreUnavailable("Postgres is unavailable: the connection was closed")
        return totals

    monkeypatch.setattr(PostgresStore, "allocate_plain", committed_then_lost)
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name})
        first = await client.post(f"/counters/{name}/next")
        second = await lost[0]

        async def voided() -> bool:
            return (await report(client, name))["voided"] == {"abandoned": 1}

        await until(voided, within=5)
        found = await report(client, name)
    assert first.status_code == 503, first.text
    assert second.status_code == 200 and second.json()["value"] == 2, second.text
    assert found["issued"] == 2 and found["delivered"] == 1 and found["unexplained_gaps"] == 0


async def test_a_record_given_up_then_replayed_by_the_shards_next_owner_is_void(
    aws: tuple[Settings, Any], name: str, monkeypatch: Any
) -> None:
    """On Kinesis a batcher whose frame cannot commit answers a record 503 before its deadline.
    Postgres away, it cannot learn whether its lease is still its own; as Postgres came back a
    batcher that took the shard over replayed the record before that deadline and allocated it,
    for a client already answered 503 (the matrix's Lambda Postgres cell: 2 values issued to no
    one, neither void nor delivered). The batcher that gives a record up now puts a cancel behind
    it first: the next owner reads the two together and allocates nothing (or, reading the
    cancel in a later frame, voids the values, abandoned: see the takeover test above)."""
    import batcher.applier
    from batcher.applier import Applier
    from infra.errors import LeaseLost, StoreUnavailable

    real = Applier._commit

    async def away(self: Applier, frame: Any, lease: Any) -> Any:
        """The record's frame cannot commit; any other (its cancel's) is given to the next owner
        uncommitted: a frame that can never commit would hold the batcher's stop for ever."""
        if any(isinstance(e.record, Record) and e.record.key == record.key for e in frame.entries):
            raise StoreUnavailable("Postgres is unavailable: the connection was closed")
        raise LeaseLost("the first owner lets its shard go")

    # The cancel may come back to the first owner in a frame of its own (after the record's
    # frame was emptied), which `away` drops as a lost lease: the shard is then not released,
    # and the heir takes it once the lease expires. Short here, so that it does in seconds.
    settings = aws[0].but(lease_ttl_s=3.0)
    async with EdgeStack(settings) as edge:
        transport = httpx.ASGITransport(app=edge.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            await client.post("/counters", json={"name": name})
            # the record's client waits 30 s; the first owner gives it up at once, as if its
            # next try could only end past that
            record = Record(reply_key(), name, 1, deadline=time.time() + 30, sent=time.time())
            monkeypatch.setattr(Applier, "_commit", away)
            monkeypatch.setattr(batcher.applier, "GIVE_UP_MARGIN_S", 60.0)
            async with BatcherStack(settings):
                edge.aws.replies.expect(record.key)
                await edge.aws.stream.put([record])
                reply = await edge.aws.replies.wait(record.key, 10)
                assert reply.error is not None and reply.error.value == "unavailable", reply
            monkeypatch.setattr(Applier, "_commit", real)
            monkeypatch.setattr(batcher.applier, "GIVE_UP_MARGIN_S", 0.5)
            async with BatcherStack(settings) as heir:  # replays it well before its deadline
                await until(lambda: heir.metrics.records_cancelled.value >= 1, within=15)
                after = await client.post(f"/counters/{name}/next")
            found = await report(client, name)
    assert heir.metrics.values_allocated.value == 1, "the given-up record took no value"
    assert after.json()["value"] == 1, after.text
    assert found["issued"] == 1 and found["voided"] == {}, found


async def test_a_keyed_retry_answered_from_a_lost_commit_keeps_its_values(
    settings: Settings, name: str, monkeypatch: Any
) -> None:
    """A keyed frame commits as Postgres goes away (its answer lost), and a retry of its
    Idempotency-Key is put while the frame is retried. The batcher finds the commit took effect
    and answers the first request 503; the retry, taken into the frame, finds the key's claim
    and is answered its values. Voiding the whole committed range made those delivered values
    void, abandoned (tests/e2e/test_failover.py, a primary killed as its synchronous standby
    confirmed the commit; `audit verify`: "the key was freed then"). A keyed record's values
    are its claim's: only the cancels free them, and not while a retry holds them."""
    from contextlib import asynccontextmanager

    from infra.adapters.postgres import PostgresStore
    from infra.errors import StoreUnavailable

    real = PostgresStore.frame
    retry: list[asyncio.Task[httpx.Response]] = []
    headers = {"Idempotency-Key": "order-7"}

    @asynccontextmanager
    async def committed_then_lost(self: PostgresStore) -> Any:
        async with real(self) as tx:
            yield tx
        if not retry:  # the retry is put as the first's commit's answer is lost
            path = f"/counters/{name}/next"
            retry.append(asyncio.create_task(client.post(path, headers=headers)))
            await asyncio.sleep(0.1)
            raise StoreUnavailable("Postgres is unavailable: the connection was closed")

    monkeypatch.setattr(PostgresStore, "frame", committed_then_lost)
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name})
        first = await client.post(f"/counters/{name}/next", headers=headers)
        second = await retry[0]
        await client.post(f"/counters/{name}/next")  # a frame after the cancel's
        await asyncio.sleep(0.2)
        found = await report(client, name)
        verified = (await client.get("/audit/verify", params={"counter": name})).json()
    assert first.status_code == 503, first.text
    assert second.status_code == 200 and second.json()["value"] == 1, second.text
    assert found["voided"] == {} and found["delivered"] == 2, found
    assert verified["ok"], verified
