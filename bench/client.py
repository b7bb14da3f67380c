"""What numerator.AsyncClient costs over raw httpx: `next` at N concurrent calls, both in one run.

    python -m bench.client --concurrency 64 --seconds 5 --rounds 3

Starts numerator on a throwaway embedded Postgres, and for each round runs, one after the
other, N concurrent loops of `next` through AsyncClient and through a bare httpx.AsyncClient
sending what a careful hand-written client sends (POST /counters/c/next with a fresh
Idempotency-Key, the JSON read). It prints each side's rate per round and the ratio of their
totals. The two share the service, the machine and the minute: the ratio is the client's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import httpx

from bench import local
from numerator.client import AsyncClient

COUNTER = "bench-client"


async def rate(call: Callable[[], Awaitable[object]], concurrency: int, seconds: float) -> float:
    """Calls per second of `concurrency` loops of `call` for `seconds`."""
    done = 0
    ends = time.monotonic() + seconds

    async def loop() -> None:
        nonlocal done
        while time.monotonic() < ends:
            await call()
            done += 1

    began = time.monotonic()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return done / (time.monotonic() - began)


async def compare(url: str, concurrency: int, seconds: float, rounds: int) -> None:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with (
        AsyncClient(url, limits=limits) as numerator,
        httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as raw,
    ):

        async def by_hand() -> object:
            answer = await raw.post(
                f"/counters/{COUNTER}/next", headers={"Idempotency-Key": uuid.uuid4().hex}
            )
            answer.raise_for_status()
            return answer.json()["value"]

        async def through_client() -> object:
            return (await numerator.next(COUNTER)).value

        await rate(by_hand, concurrency, 1)  # warm both pools
        await rate(through_client, concurrency, 1)
        totals = {"httpx": 0.0, "client": 0.0}
        print(f"{'round':>5} {'httpx rps':>10} {'client rps':>11} {'ratio':>6}")
        for n in range(1, rounds + 1):
            plain = await rate(by_hand, concurrency, seconds)
            ours = await rate(through_client, concurrency, seconds)
            totals["httpx"] += plain
            totals["client"] += ours
            print(f"{n:>5} {plain:>10,.0f} {ours:>11,.0f} {ours / plain:>6.2f}")
        print(f"client / httpx over {rounds} rounds: {totals['client'] / totals['httpx']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    env = {"IDEMPOTENCY_KEYS_PER_S": "1000000"}  # this measures the client, not the limit
    with local.database() as db, local.serve("numerator", db, 1, env) as target:
        local.create_counters(target.url, [COUNTER])
        asyncio.run(compare(target.url, args.concurrency, args.seconds, args.rounds))


if __name__ == "__main__":
    main()
