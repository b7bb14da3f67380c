"""`numerator batcher`: the batcher as its own long-running process, with /healthz and /metrics on
a port of its own for a container's health check and a scraper.

SIGTERM (or SIGINT) finishes the open frame, publishes its replies and releases the leases, so
that another batcher takes the shards over at once; SIGKILL leaves the leases to expire after
LEASE_TTL_S, and the next owner publishes what was committed but not published.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys

from infra.errors import NumeratorError
from infra.faults import Faults
from infra.observe.health import verdict
from infra.observe.workers import sharing, workers_dir
from infra.run import loop
from infra.settings import Settings
from numerator.stack import BatcherStack, HubStack

log = logging.getLogger("numerator.batcher")


async def run(
    settings: Settings, host: str, port: int, owner: str | None = None, faults: Faults | None = None
) -> None:
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stopping.set)
    kind = HubStack if settings.local.hub else BatcherStack
    async with kind(settings, owner=owner, faults=faults) as stack:

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                line = await asyncio.wait_for(reader.readline(), 5)
                while (await asyncio.wait_for(reader.readline(), 5)).strip():
                    pass  # headers: nothing here needs them
                parts = line.decode("latin-1").split()
                path = parts[1] if len(parts) > 1 else ""
                status, body, kind = await respond(stack, path)
                head = (
                    f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                )
                writer.write(head.encode() + body)
                await writer.drain()
            except (TimeoutError, ConnectionError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(answer, host, port)
        where = (
            f"the workers' records at {settings.local.hub}"
            if settings.local.hub
            else f"stream {settings.aws.stream_name}, replies in {settings.aws.reply_table}"
        )
        print(
            f"numerator batcher is up: {where}; /healthz and /metrics at http://{host}:{port}",
            flush=True,
        )
        async with contextlib.AsyncExitStack() as lines:
            directory = workers_dir()
            if directory is not None:  # the machine's batcher: the workers' /metrics add it up
                await lines.enter_async_context(sharing(directory, stack.observed))
            if settings.frames.emf_interval_s:  # ECS's awslogs driver takes them to CloudWatch
                from infra.observe.emf import writing

                every = settings.frames.emf_interval_s
                await lines.enter_async_context(writing(stack.metrics, "batcher", every))
            await stopping.wait()
            server.close()
        log.info("stopping: finishing the open frames and releasing the leases")
    print("numerator batcher stopped", file=sys.stderr, flush=True)


async def respond(stack: BatcherStack, path: str) -> tuple[str, bytes, str]:
    if path == "/metrics":
        stack.metrics.sample()
        metrics = stack.metrics.health(await stack.health.recent())
        return "200 OK", metrics.render().encode(), "text/plain; version=0.0.4"
    if path == "/healthz":
        status, body = verdict(await stack.health.report(), stack.health.alerts)
        line = "200 OK" if status == 200 else "503 Service Unavailable"
        return line, json.dumps(body).encode(), "application/json"
    return "404 Not Found", b"no such path: /healthz or /metrics", "text/plain"


def main(
    settings: Settings, host: str, port: int, owner: str | None = None, faults: Faults | None = None
) -> None:
    """Run the batcher on the HTTP workers' loop, so that its timers behave as the embedded
    batcher's do (FRAME_MIN_MS=0.5: one turn of the loop, not the 1 ms that the stdlib loop's
    epoll wait rounds up to)."""
    try:
        loop.run(lambda: run(settings, host, port, owner, faults))
    except NumeratorError as exc:
        print(f"numerator batcher: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
