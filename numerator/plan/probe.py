"""One Lambda container alone in a process, timed: a Lambda's CPU a warm invocation, which
`numerator plan` bills at the share of a vCPU the function's memory buys.

`numerator plan --measure-cpu` runs `python -m numerator.plan.probe` in a child process: moto
server and a batcher in processes of their own and a throwaway Postgres, as `numerator up --aws
moto` has them, and here one container of the Lambda edge (`functions.handler.build`, through the
local runner's timing) and one of the atomic counter (`bench.atomic`), each invoked one request
at a time with API Gateway events, a little apart. Lambda runs one container a process;
`numerator up --edge lambda` runs eight in one granian worker, where they and the server's own
threads share a GIL, and switching between them costs CPU of its own (docs/plan.md has the
figures). It prints JSON: each edge's CPU a warm invocation, in ms.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any

import orjson

INVOCATIONS, GAP_S = 60, 0.1
NAME = "probe"


def request(method: str, path: str, body: bytes = b"") -> dict[str, Any]:
    from infra.run.apigateway import event

    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
    scope = {"method": method, "path": path, "query_string": b"", "headers": headers}
    return event(scope, body)


def timed(
    invoke: Callable[[dict[str, Any]], dict[str, Any]],
    spent: Callable[[], float],
    invocations: int,
) -> float:
    """CPU ms a warm invocation: `invoke` (which makes the counter, then takes values), and
    `spent`, the CPU seconds its timed invocations took so far."""
    made = invoke(request("POST", "/counters", orjson.dumps({"name": NAME})))
    if made["statusCode"] not in (200, 201):
        raise RuntimeError(f"the probe's counter was not made: {made}")
    for _ in range(3):  # a container's first calls load what it keeps
        invoke(request("POST", f"/counters/{NAME}/next"))
    before = spent()
    for _ in range(invocations):
        time.sleep(GAP_S)
        answer = invoke(request("POST", f"/counters/{NAME}/next"))
        if answer["statusCode"] != 200:
            raise RuntimeError(f"a timed invocation failed: {answer}")
    return round((spent() - before) / invocations * 1000, 2)


def edge_cpu(invocations: int) -> float:
    """The Lambda edge's container, timed as `numerator up --edge lambda` times it."""
    from numerator.lambdaedge import LambdaEdge

    edge = LambdaEdge(1)
    thread = ThreadPoolExecutor(1)  # the container's thread: its loop and handler live there

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        return thread.submit(edge._invoke, event).result()

    def spent() -> float:
        return edge.containers[0].invocation_cpu_seconds.sum if edge.containers else 0.0

    return timed(invoke, spent, invocations)


def atomic_cpu(invocations: int) -> float:
    """The atomic counter's container, timed as its local runner times it (`atomic.invoke`): its
    handler makes its one call in its own thread."""
    from bench import atomic

    atomic.make_table(atomic.TABLE)
    thread = ThreadPoolExecutor(1)

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        return thread.submit(atomic.invoke, event).result()

    return timed(invoke, lambda: atomic.TALLY.cpu, invocations)


@contextmanager
def aws_stack() -> Iterator[None]:
    """moto server, a throwaway Postgres and a batcher, as `numerator up --aws moto` has them,
    with this process's environment set for a container to reach them."""
    from bench.local import database
    from infra.adapters.aws import clients, create
    from infra.adapters.postgres import migrate
    from infra.settings import LOOPBACK_ONLY, Mode, ReadBeats, Settings
    from numerator import local

    with ExitStack() as running:
        moto = running.enter_context(local.moto_server())
        aws = local.aws_environment(moto.url)
        postgres = running.enter_context(database())
        settings = Settings.from_env({}).but(
            mode=Mode.AWS,
            database_url=postgres.url,
            shards=4,
            read_beats=ReadBeats.PHASED,
            authorizer=f"{LOOPBACK_ONLY} (the probe)",
        )
        create(clients(settings, aws), settings)
        asyncio.run(migrate(settings.database.database_url))
        env = {**settings.to_env(), **aws}
        running.enter_context(local.batchers(1, env))
        os.environ.update(env)
        os.environ["ATOMIC_ENDPOINT"] = moto.url
        yield


def main(invocations: int = INVOCATIONS) -> None:
    with aws_stack():
        out = {"lambda": edge_cpu(invocations), "atomic": atomic_cpu(invocations)}
        sys.stdout.write(orjson.dumps({"invocation_cpu_ms": out}).decode())
        sys.stdout.write("\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else INVOCATIONS)
