"""Uniqueness and order under concurrency: one hot counter, many counters, several batchers."""

from __future__ import annotations

import asyncio
import random
import time

import httpx
import pytest

from infra.settings import Settings
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client
from tests.checks import Answer, assert_guarantees, assert_ordered


async def drive(
    clients: list[httpx.AsyncClient], counters: list[str], workers: int, each: int, seed: int = 7
) -> list[Answer]:
    """`workers` concurrent loops, each sending `each` requests one after another."""
    rng = random.Random(seed)
    answers: list[Answer] = []

    async def loop(n: int) -> None:
        client = clients[n % len(clients)]
        for _ in range(each):
            counter = rng.choice(counters)
            count = rng.choice((1, 1, 1, 2, 5))
            sent = time.monotonic()
            response = await client.post(f"/counters/{counter}/next", params={"count": count})
            received = time.monotonic()
            assert response.status_code == 200, response.text
            body = response.json()
            first = body.get("first", body.get("value"))
            last = body.get("last", body.get("value"))
            assert last - first + 1 == count
            answers.append(Answer(counter, first, last, sent, received))

    await asyncio.gather(*(loop(n) for n in range(workers)))
    return answers


async def test_one_hot_counter(client: httpx.AsyncClient, name: str) -> None:
    await client.post("/counters", json={"name": name})
    answers = await drive([client], [name], workers=100, each=30)
    assert len(answers) == 3000
    assert_guarantees(answers)
    assert_ordered(answers)


@pytest.mark.slow  # 3-5 s: the fast lane's budget (docs/testing.md)
async def test_many_counters(client: httpx.AsyncClient, name: str) -> None:
    names = [f"{name}-{i}" for i in range(25)]
    for n in names:
        await client.post("/counters", json={"name": n})
    answers = await drive([client], names, workers=100, each=30)
    assert_guarantees(answers)
    assert_ordered(answers)


def client_of(stack: EmbeddedStack) -> httpx.AsyncClient:
    return asgi_client(stack.app())


async def test_two_batchers_share_one_hot_counter(settings: Settings, name: str) -> None:
    """Two stacks (as two server workers would run) on one Postgres, each with its batcher."""
    one, two = (
        EmbeddedStack(settings.but(back_frame_ms=3)),
        EmbeddedStack(settings.but(back_frame_ms=5)),
    )
    async with one, two:
        clients = [client_of(one), client_of(two)]
        await clients[0].post("/counters", json={"name": name})
        await clients[1].post("/counters", json={"name": name + "-x"})
        answers = await drive(clients, [name, name + "-x"], workers=80, each=30)
        for c in clients:
            await c.aclose()
    hot = [a for a in answers if a.counter == name]
    assert len(hot) > 1000
    assert_guarantees(hot)
    assert_ordered(hot)
    frames = one.metrics.frames_committed.value + two.metrics.frames_committed.value
    assert one.metrics.frames_committed.value > 0 and two.metrics.frames_committed.value > 0
    assert frames < len(hot) / 3, "frames should carry many requests each"


async def test_one_idempotency_key_on_two_batchers_is_allocated_once(
    settings: Settings, name: str
) -> None:
    """The same request, key and all, sent to two stacks at once (two server workers, each with
    its own stream and batcher, on one Postgres): both answers are the one value, never two."""
    many = settings.but(back_frame_ms=2, idempotency_keys_per_s=10_000)  # 300 keys at once
    one, two = EmbeddedStack(many), EmbeddedStack(many)
    async with one, two:
        clients = [client_of(one), client_of(two)]
        await clients[0].post("/counters", json={"name": name})

        async def both(key: str) -> list[int]:
            responses = await asyncio.gather(
                *(
                    c.post(f"/counters/{name}/next", headers={"Idempotency-Key": key})
                    for c in clients
                )
            )
            assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
            return [r.json()["value"] for r in responses]

        pairs = await asyncio.gather(*(both(f"k{i}") for i in range(300)))
        allocated = await one.store.allocated(name, "")
        for c in clients:
            await c.aclose()
    assert all(a == b for a, b in pairs), [p for p in pairs if p[0] != p[1]][:5]
    values = [a for a, _ in pairs]
    assert sorted(values) == list(range(1, 301)), "one value per key, none wasted"
    assert allocated == 300
