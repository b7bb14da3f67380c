"""A TCP proxy in front of a live service that fails chosen requests the way networks do: for a
client's tests, which must see the service's own behaviour behind the failure."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from infra.run.server import free_port

UNAVAILABLE = json.dumps(
    {
        "type": "urn:numerator:problem:unavailable",
        "title": "Service Unavailable",
        "status": 503,
        "detail": "injected by the test proxy",
    }
).encode()


@dataclass
class Seen:
    at: float
    path: str
    idempotency_key: str | None
    done: str


class Proxy:
    """One request per connection (the service is asked to close after each). `plan` holds what
    to do with the next /next requests, in order: 'drop' forwards the request, waits for the
    service's whole answer, and closes the client's connection without it; '503' answers 503
    with Retry-After: 1 without forwarding. Requests past the plan pass through."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.plan: list[str] = []
        self.seen: list[Seen] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def serve() -> None:
            self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
            self.ready.set()
            async with self.server:
                await self.server.serve_forever()

        with suppress(asyncio.CancelledError):
            self.loop.run_until_complete(serve())
        # The connections cancelled at `stop` close before the loop does: a StreamWriter
        # collected later, its loop closed, warned ('loop is closed') in whichever test ran then.
        left = asyncio.all_tasks(self.loop)
        if left:
            self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))

    def next_requests(self) -> list[Seen]:
        return [s for s in self.seen if s.path.split("?")[0].endswith("/next")]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._relay(reader, writer)
        finally:
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        is_next = path.split("?")[0].endswith("/next")
        action = self.plan.pop(0) if is_next and self.plan else "pass"
        self.seen.append(Seen(time.monotonic(), path, headers.get("idempotency-key"), action))
        if action == "503":
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n"
                b"retry-after: 1\r\nconnection: close\r\n"
                + f"content-length: {len(UNAVAILABLE)}\r\n\r\n".encode()
                + UNAVAILABLE
            )
            await writer.drain()
            return
        kept = [line for line in lines[1:] if line and not line.lower().startswith("connection:")]
        request = "\r\n".join([lines[0], *kept, "connection: close", "", ""]).encode() + body
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        try:
            up_writer.write(request)
            await up_writer.drain()
            answer = await up_reader.read()  # to EOF: the service closes after its whole answer
        finally:
            up_writer.close()
        if action != "drop":
            writer.write(answer)
            await writer.drain()

    def start(self) -> Proxy:
        self.thread.start()
        self.ready.wait(10)
        return self

    def stop(self) -> None:
        def shut() -> None:
            self.server.close()
            for task in asyncio.all_tasks(self.loop):
                task.cancel()

        self.loop.call_soon_threadsafe(shut)
        self.thread.join(10)
        self.loop.close()


@contextmanager
def proxy(upstream_port: int) -> Iterator[Proxy]:
    running = Proxy(upstream_port).start()
    try:
        yield running
    finally:
        running.stop()


@contextmanager
def silent() -> Iterator[str]:
    """The URL of an endpoint that takes every connection and reads what comes but never
    answers (a stream's endpoint that hangs); its connections are closed at the end."""
    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[socket.socket] = []
    stopping = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stopping.is_set():
            with suppress(TimeoutError):
                connection, _ = listener.accept()
                taken.append(connection)  # read by no one: the client's request waits

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stopping.set()
        thread.join(5)
        for connection in taken:
            connection.close()
        listener.close()
