"""Front frames on the AWS path's server edge, against moto server and a real batcher: one record
per counter per frame, its range split in arrival order; Idempotency-Key requests as records of
their own; and stream or table throttling, injected at the boto3 client, retried and then answered
503 with Retry-After without allocating anything."""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections import Counter as Tally
from typing import Any

import httpx
import pytest

from infra.adapters.postgres import PostgresStore
from infra.adapters.pushkeys import new_key
from infra.settings import ReplyItems, Settings
from tests.aws import Throttle, resources
from tests.checks import until
from tests.front import burst, running, values


async def test_a_front_frame_puts_one_record_per_counter_and_splits_it_in_arrival_order(
    aws: tuple[Settings, Any], name: str
) -> None:
    settings, _ = aws
    async with running(settings, name, front_frame_ms=200.0) as (edge, client, _):
        other = name + "-b"
        await client.post("/counters", json={"name": other})
        tasks = []
        for i in range(30):  # started in this order, within one 200 ms frame
            url = f"/counters/{name if i % 3 else other}/next"
            tasks.append(asyncio.create_task(client.post(url, params={"count": 1 + i % 2})))
            await asyncio.sleep(0)
        got = await asyncio.gather(*tasks)
        keyed = await burst(client, name, 3, headers={"Idempotency-Key": "k-1"})
        metrics = edge.metrics
    assert [r.status_code for r in got] == [200] * 30
    mine = [r.json() for i, r in enumerate(got) if i % 3]
    firsts = [b.get("value", b.get("first")) for b in mine]
    assert firsts == sorted(firsts), "a frame's range is split in the order requests arrived"
    assert sorted(values(got[i] for i in range(30) if i % 3)) == list(range(1, 31))
    assert sorted(values(got[i] for i in range(30) if not i % 3)) == list(range(1, 16))
    assert len({tuple(values([r])) for r in keyed}) == 1 and values(keyed[:1]) == [31]
    assert metrics.next_requests.value == 33
    # 30 requests in (usually) one frame: two records, one per counter; the keyed ones alone.
    assert metrics.records_put.value <= 2 * 2 + 3, metrics.records_put.value
    assert metrics.front_frame_requests.count >= 2


async def test_the_embedded_default_and_lambda_put_one_record_per_request(
    aws: tuple[Settings, Any], name: str
) -> None:
    settings, _ = aws
    async with running(settings, name, front_frame_ms=0.0) as (edge, client, _):
        got = await burst(client, name, 20)
    assert sorted(values(got)) == list(range(1, 21))
    assert edge.metrics.records_put.value == 20


async def test_a_throttled_put_is_retried_and_then_answered_503_allocating_nothing(
    aws: tuple[Settings, Any], name: str, store: PostgresStore
) -> None:
    settings, _ = aws
    async with running(settings, name) as (edge, client, _):
        kinesis = edge.aws.clients.kinesis
        code = "ProvisionedThroughputExceededException"
        with Throttle(kinesis, "PutRecords", code, 2), Throttle(kinesis, "PutRecord", code, 2):
            brief = await burst(client, name, 10)
        with (
            Throttle(kinesis, "PutRecords", code) as one,
            Throttle(kinesis, "PutRecord", code) as two,
        ):
            refused = await burst(client, name, 10)
            keyed = await burst(client, name, 1, headers={"Idempotency-Key": "k-2"})
        after = await burst(client, name, 5)
        throttles = edge.metrics.aws_throttles.values
    assert sorted(values(brief)) == list(range(1, 11))
    assert [r.status_code for r in refused + keyed] == [503] * 11
    assert all(r.headers["retry-after"] == "1" for r in refused + keyed)
    assert {r.json()["type"].rsplit(":", 1)[-1] for r in refused} == {"unavailable"}
    assert one.calls + two.calls >= 6  # each put tried six times before giving up
    assert sum(throttles.values()) >= 4 + 6
    # Nothing was allocated for the 503s: the next values follow on from the first ten.
    assert sorted(values(after)) == list(range(11, 16))
    assert await store.allocated(name, "") == 15


@pytest.mark.parametrize(
    ("items", "poll", "call"),
    [(ReplyItems.FRAME, "Query", "query"), (ReplyItems.RECORD, "BatchGetItem", "batch_get_item")],
)
async def test_throttled_reads_of_the_stream_and_the_table_are_retried(
    aws: tuple[Settings, Any], name: str, items: ReplyItems, poll: str, call: str
) -> None:
    settings, _ = aws
    # replies from the table alone: a push would answer them before any read of it
    async with running(settings, name, front_frame_ms=5.0, reply_items=items, reply_push="off") as (
        edge,
        client,
        back,
    ):
        assert back.aws is not None
        reads = Throttle(
            back.aws.clients.kinesis, "GetRecords", "ProvisionedThroughputExceededException", 3
        )
        writes = Throttle(back.aws.clients.dynamodb, "BatchWriteItem", "ThrottlingException", 3)
        polls = Throttle(edge.aws.clients.dynamodb, poll, "ThrottlingException", 3)
        with reads, writes, polls:
            got = await burst(client, name, 10)
        batcher_throttles = back.metrics.aws_throttles.values
        edge_throttles = edge.metrics.aws_throttles.values
    assert Tally(r.status_code for r in got) == {200: 10}
    assert sorted(values(got)) == list(range(1, 11))
    assert (reads.calls, writes.calls, polls.calls) == (3, 3, 3)
    assert batcher_throttles == {"get_records": 3, "batch_write_item": 3}
    assert edge_throttles == {call: 3}


@pytest.mark.slow  # 3-5 s: the fast lane's budget (docs/testing.md)
async def test_auto_front_frames_go_out_once_the_stream_is_free(
    aws: tuple[Settings, Any], name: str
) -> None:
    """FRONT_FRAME_POLICY=auto: a lone request is put at once, not after FRONT_FRAME_MS (the
    longest wait); requests that arrive while a put is out share the next record."""
    settings, _ = aws
    async with running(settings, name, front_frame_ms=1500.0, front_frame_policy="auto") as (
        edge,
        client,
        _,
    ):
        began = time.monotonic()
        lone = await client.post(f"/counters/{name}/next")
        took = time.monotonic() - began
        got = await burst(client, name, 40)
        put = edge.metrics.records_put.value
    fixed = {"front_frame_ms": 1500.0, "front_frame_policy": "fixed"}
    async with running(settings, name + "-f", **fixed) as (_, fixed_client, _):
        began = time.monotonic()
        held = await fixed_client.post(f"/counters/{name}-f/next")
        waited = time.monotonic() - began
    assert lone.status_code == 200 and took < 1.0, took
    assert held.status_code == 200 and waited >= 1.5, waited  # fixed: the whole frame
    assert sorted(values(got)) == list(range(2, 42))
    assert put < 41, "the burst shared records while puts were out"


@pytest.mark.slow  # 3-5 s: the fast lane's budget (docs/testing.md)
async def test_a_refused_data_plane_turns_health_red_and_is_never_retried(
    aws: tuple[Settings, Any], name: str
) -> None:
    """Issue 28, finding 6: DynamoDB refusing every read of replies (AccessDenied) while its
    DescribeTable answers. The edge's /healthz turns red naming the refusal within seconds and
    green again once calls work; a request whose reply cannot be read, and one whose put is
    refused, are answered 502 backend-refused naming it, without Retry-After, after one try
    (a refusal is not retried)."""
    settings, _ = aws
    off = {"reply_push": "off"}  # its replies read from the table: none pushed before
    async with running(settings, name, reply_timeout_s=1.0, **off) as (edge, client, _):
        assert (await client.get("/healthz")).status_code == 200
        denied = "AccessDeniedException"
        with Throttle(edge.aws.clients.dynamodb, "Query", denied) as reads:
            cut = await burst(client, name, 3)

            async def red() -> bool:
                answer = await client.get("/healthz")
                return answer.status_code == 503 and denied in answer.json()["calls"]

            took = await until(red, within=5)
        kinesis = edge.aws.clients.kinesis
        with (
            Throttle(kinesis, "PutRecords", denied) as puts,
            Throttle(kinesis, "PutRecord", denied) as put,
        ):
            refused = await burst(client, name, 2)

        async def green() -> bool:
            await burst(client, name, 1)
            return (await client.get("/healthz")).status_code == 200

        await until(green, within=10)
    assert [r.status_code for r in cut] == [502] * 3 and reads.calls >= 1, [r.text for r in cut]
    assert all("retry-after" not in r.headers and denied in r.json()["detail"] for r in cut)
    print(f"/healthz red {took:.2f} s after the refusals began")
    assert [r.status_code for r in refused] == [502, 502], [r.text for r in refused]
    assert all("retry-after" not in r.headers for r in refused)
    assert {r.json()["type"].rsplit(":", 1)[-1] for r in refused} == {"backend-refused"}
    assert denied in refused[0].json()["detail"]
    assert puts.calls + put.calls == 1, "one put for the frame of two, tried once"


@pytest.mark.parametrize(
    ("items", "read_with", "not_with"),
    [(ReplyItems.FRAME, "query", "batch_get_item"), (ReplyItems.RECORD, "batch_get_item", "query")],
)
async def test_a_burst_is_answered_from_the_reply_items_the_setting_names(
    aws: tuple[Settings, Any], name: str, items: ReplyItems, read_with: str, not_with: str
) -> None:
    """REPLY_ITEMS=frame (the default): the edge's keys are grouped, the batcher writes an item
    per frame for the edge, and the edge reads them with Query, never BatchGetItem; `record`: an
    item per record, read by key (BatchGetItem), as the Lambda edge does."""
    settings, _ = aws
    async with running(settings, name, reply_items=items, reply_push="off") as (
        edge,
        client,
        back,
    ):
        got = await burst(client, name, 20)
        calls = edge.metrics.aws_calls.values
        # the batcher counts its write once the call returns, and the edge (reading at the lag it
        # learned) can find the item and answer before the batcher's task resumes: CI saw 0
        await until(lambda: back.metrics.reply_items.values.get("written", 0) >= 1, within=5)
    assert sorted(values(got)) == list(range(1, 21))
    assert calls.get(read_with, 0) >= 1 and not_with not in calls, calls


@pytest.mark.slow  # two stacks, 0.6 s of requests each: 5 s
async def test_beats_front_frames_put_once_a_beat_just_before_the_batchers_read(
    aws: tuple[Settings, Any], name: str
) -> None:
    """FRONT_FRAME_POLICY=beats: a frame closes at the last moment its put returns before the
    batchers' next read, so requests that arrive over a beat share one put (and those that came
    just after it a second chance at the same read), where 20 ms fixed frames put several times a
    beat; every one is answered, values unique; the edge learns how long a close takes to
    return."""
    settings, _ = aws
    interval = 0.2  # AWS's five reads a second per shard

    sent: list[float] = []

    async def spread(client: httpx.AsyncClient, counter: str) -> list[httpx.Response]:
        async def one(at: float) -> httpx.Response:
            await asyncio.sleep(at)
            sent.append(time.monotonic())
            return await client.post(f"/counters/{counter}/next")

        return list(await asyncio.gather(*(one(i * 0.01) for i in range(60))))  # over 0.6 s

    puts, beats_spanned = {}, 0
    for policy in ("beats", "fixed"):
        counter = f"{name}-{policy}"
        async with running(
            settings, counter, read_interval_ms=interval * 1000, front_frame_policy=policy
        ) as (edge, client, _):
            sent.clear()
            got = await spread(client, counter)
            puts[policy] = edge.metrics.records_put.value
            if policy == "beats":  # a starved loop sends later than asked: count what it did
                beats_spanned = math.ceil((sent[-1] - sent[0]) / interval) + 1
            assert [r.status_code for r in got] == [200] * 60, policy
            assert sorted(values(got)) == list(range(1, 61)), policy
            if policy == "beats":
                front = edge.edge.front
                assert front is not None and front.closing.mean > 0
    # 0.6 s spans three or four beats: two puts each at most (the beat's and its second chance),
    # and one more for a put that returned late; fixed 20 ms frames put about thirty times, ten
    # where a starved machine's loop ran late (CI): more than one a beat either way
    assert puts["beats"] <= 2 * beats_spanned + 1, (puts, beats_spanned)
    assert puts["fixed"] > beats_spanned + 1, (puts, beats_spanned)


@pytest.mark.slow  # a stream of two shards, 0.6 s of requests: 4 s
async def test_beats_front_frames_on_phased_beats_go_to_the_shard_read_next(
    aws: tuple[Settings, Any], name: str
) -> None:
    """FRONT_FRAME_POLICY=beats with READ_BEATS=phased on two shards (read 100 ms apart): a frame
    closes at the last moment its put returns before the next read of either shard, and its
    records (one a counter) all go to that shard, so requests wait a quarter of the interval on
    average for the read, not half, at two puts a beat (four with their second chances); every
    one is answered, values unique."""
    settings, _ = aws
    other = f"{name}-b"
    with resources(settings, shards=2) as (own, _):
        async with running(
            own, name, read_interval_ms=200.0, front_frame_policy="beats", read_beats="phased"
        ) as (edge, client, _):
            await client.post("/counters", json={"name": other})
            await client.post(f"/counters/{name}/next")  # the first put lists the shards

            async def one(at: float, counter: str) -> httpx.Response:
                await asyncio.sleep(at)
                return await client.post(f"/counters/{counter}/next")

            began = edge.metrics.records_put.value
            got = await asyncio.gather(
                *(one(i * 0.01, name if i % 2 else other) for i in range(60))  # over 0.6 s
            )
            records = edge.metrics.records_put.value - began
            stream = edge.aws.stream
            phases = {stream.phase(key) for key in list(stream.placement.placed)[1:]}
    assert [r.status_code for r in got] == [200] * 60
    assert sorted(values(got[1::2])) == list(range(2, 32))
    assert sorted(values(got[0::2])) == list(range(1, 31))
    assert len(phases) == 2, phases  # both shards, each at its own phase
    # 0.6 s spans six or seven reads: a frame each and its second chance, of two records each
    # (one a counter)
    assert records <= 2 * 2 * 8, records


async def test_pushed_replies_answer_without_a_table_read_and_a_lost_push_falls_back_to_it(
    aws: tuple[Settings, Any], name: str
) -> None:
    """REPLY_PUSH (auto, the default): the batcher pushes a frame's replies to the edge's inbox
    once they are committed, and the edge answers every one from them, not the table, which
    is still written (a retry, a takeover or an heir finds them there). A push that never
    arrives (here: its records name a port nobody listens on) costs a table read, no answer."""
    settings, _ = aws
    # the edge's first table read half a beat after the batchers': a starved machine's commit
    # still comes before it
    async with running(settings, name, reply_lag_ms=100.0, push_keys=new_key()) as (
        edge,
        client,
        back,
    ):
        assert edge.edge.front is not None and edge.inbox is not None
        got = await burst(client, name, 20)
        pushed, put = edge.metrics.replies_pushed.value, edge.metrics.records_put.value
        await until(lambda: back.metrics.reply_items.values.get("written", 0) >= 1, within=5)
        assert back.metrics.pushes_sent.value >= 1
        # a datagram not signed with the push key is dropped, and counted
        host, port = edge.inbox.to.split(":")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            out.sendto(b"\x00" * 32 + b'{"k":"forged"}', (host, int(port)))
        await until(lambda: edge.metrics.pushes_dropped.value == 1, within=5)
        # the port of the discard service: the datagrams go, and nobody reads them
        edge.edge.front.to = "127.0.0.1:9"
        lost = await burst(client, name, 5)
        read = edge.metrics.aws_calls.values.get("query", 0)
    assert [r.status_code for r in got + lost] == [200] * 25, [r.text for r in got + lost]
    assert sorted(values(got)) == list(range(1, 21)) and sorted(values(lost)) == [
        21,
        22,
        23,
        24,
        25,
    ]
    # every record answered by its push: a table read that found its reply first would have
    # answered it instead (one that came before the push, on a starved machine, found nothing)
    assert pushed == put >= 1, (pushed, put)
    assert read >= 1 and edge.metrics.replies_pushed.value == pushed


async def test_each_hop_of_a_request_is_counted_where_it_happens(
    aws: tuple[Settings, Any], name: str
) -> None:
    """numerator_hop_seconds: the edge counts a request's front frame, put and reply once a
    request (a keyed one, put alone, no front frame); the batcher its records' stream, frame,
    commit and publish, from Kinesis's arrival stamp on. Each no longer than the whole."""
    settings, _ = aws
    async with running(settings, name, front_frame_ms=50.0) as (edge, client, back):
        began = time.monotonic()
        got = await burst(client, name, 10)
        keyed = await client.post(f"/counters/{name}/next", headers={"Idempotency-Key": "hop"})
        took = time.monotonic() - began
        hops = back.metrics.hop_seconds.values
        await until(lambda: "publish" in hops and hops["publish"].count >= 2, within=5)
        text = edge.metrics.render()
    assert [r.status_code for r in [*got, keyed]] == [200] * 11
    at_edge = edge.metrics.hop_seconds.values
    assert at_edge["front"].count == 10, "once for each request through a front frame"
    assert at_edge["put"].count == at_edge["reply"].count == 11, "and the keyed one's own record"
    in_batcher = back.metrics.hop_seconds.values
    assert {"stream", "frame", "commit", "publish"} <= set(in_batcher)
    records = in_batcher["commit"].count
    assert 2 <= records <= 11 and in_batcher["stream"].count == records
    for each in [*at_edge.values(), *in_batcher.values()]:
        assert 0 <= each.sum <= each.count * took, each.name
    assert 'numerator_hop_seconds_bucket{hop="front",le="+Inf"} 10' in text
    assert 'numerator_hop_seconds_count{hop="put"} 11' in text
