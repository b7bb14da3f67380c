"""A small HTTP/1.1 client on asyncio protocols: keep-alive connections, Content-Length and
chunked bodies. The load generator's engine, so a request costs no task, no future and no timer
of its own: `submit` writes it on an idle connection (or queues it for the next one free), and
its answer comes back through a callback from `data_received`. `send` is the awaitable form, for
callers that want one."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

SWEEP_S = 0.1  # how often requests on the wire are checked against their timeout


class HttpError(Exception):
    """The connection failed or the response could not be read; `kind` names how."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


# what becomes of one request: (tag, status, body, None), or (tag, 0, b"", the error)
Done = Callable[[Any, int, bytes, HttpError | None], None]


class Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time; each answer goes to `finish`."""

    def __init__(
        self, finish: Callable[[Connection, Any, Done, int, bytes, HttpError | None], None]
    ) -> None:
        self.finish = finish
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.since = 0.0  # when the request on the wire was written
        self.timeout = 0.0
        self.tag: Any = None
        self.done: Done | None = None  # the request on the wire's; None while idle

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._end(0, b"", HttpError("disconnected", str(exc or "")))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.done is None:
            return
        try:
            parsed = _parse(self.buffer)
        except HttpError as exc:
            self._end(0, b"", exc)
            return
        if parsed is not None:
            status, body, used = parsed
            del self.buffer[:used]
            self._end(status, body, None)

    def write(self, raw: bytes, now: float, timeout: float, tag: Any, done: Done) -> None:
        assert self.transport is not None
        self.since, self.timeout, self.tag, self.done = now, timeout, tag, done
        self.transport.write(raw)

    def expire(self) -> None:
        self._end(0, b"", HttpError("timeout", f"no response in {self.timeout:g}s"))

    def _end(self, status: int, body: bytes, error: HttpError | None) -> None:
        done, tag = self.done, self.tag
        if done is not None:
            self.done = self.tag = None
            self.finish(self, tag, done, status, body, error)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _parse(buffer: bytearray) -> tuple[int, bytes, int] | None:
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buffer[:end]).split(b"\r\n")
    try:
        status = int(head[0].split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise HttpError("bad-response", repr(head[0][:60])) from None
    length, chunked = None, False
    for line in head[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    start = end + 4
    if chunked:
        body = bytearray()
        position = start
        while True:
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                return None
            size = int(bytes(buffer[position:line_end]).split(b";")[0], 16)
            chunk_start = line_end + 2
            if len(buffer) < chunk_start + size + 2:
                return None
            if size == 0:
                return status, bytes(body), chunk_start + 2
            body += buffer[chunk_start : chunk_start + size]
            position = chunk_start + size + 2
    length = length or 0
    if len(buffer) < start + length:
        return None
    return status, bytes(buffer[start : start + length]), start + length


class HttpPool:
    """Up to `limit` keep-alive connections to one host. A request that finds none free waits
    in a queue for the next (the wait counts in its latency, which runs from its scheduled
    time); its timeout runs from when it is written."""

    def __init__(self, url: str, limit: int, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(url)
        self.headers = headers or {}
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"only http:// URLs are supported, not {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.limit = limit
        self.idle: list[Connection] = []
        self.wire: set[Connection] = set()  # connections with a request on them
        self.opened = 0
        self.queue: deque[tuple[bytes, float, Any, Done]] = deque()
        self.sweeping: asyncio.TimerHandle | None = None

    def build(self, method: str, path: str, headers: dict[str, str] | None = None) -> bytes:
        lines = [
            f"{method} {self.prefix}{path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Content-Length: 0",
        ]
        lines += [f"{k}: {v}" for k, v in {**self.headers, **(headers or {})}.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    @property
    def waiting(self) -> int:
        return len(self.queue)

    def submit(self, raw: bytes, timeout: float, tag: Any, done: Done) -> None:
        """Send `raw` now, or as soon as a connection is free; `done(tag, …)` gets the answer."""
        while self.idle:
            connection = self.idle.pop()
            if not connection.closed:
                self._write(connection, raw, timeout, tag, done)
                return
            self.opened -= 1
        self.queue.append((raw, timeout, tag, done))
        if self.opened < self.limit:
            self.opened += 1
            asyncio.get_running_loop().create_task(self._open())

    async def send(self, raw: bytes, timeout: float) -> tuple[int, bytes]:
        """`submit`, awaited: the status and body, or HttpError."""
        answer: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()

        def done(_: Any, status: int, body: bytes, error: HttpError | None) -> None:
            if answer.done():
                return
            if error is not None:
                answer.set_exception(error)
            else:
                answer.set_result((status, body))

        self.submit(raw, timeout, None, done)
        return await answer

    async def _open(self) -> None:
        try:
            _, connection = await asyncio.get_running_loop().create_connection(
                lambda: Connection(self._finish), self.host, self.port
            )
        except OSError as exc:
            self.opened -= 1
            if self.queue:  # this slot's request fails; the others keep their place
                _, _, tag, done = self.queue.popleft()
                done(tag, 0, b"", HttpError("connect", str(exc)))
            return
        self._next(connection)

    def _write(
        self, connection: Connection, raw: bytes, timeout: float, tag: Any, done: Done
    ) -> None:
        loop = asyncio.get_running_loop()
        connection.write(raw, loop.time(), timeout, tag, done)
        self.wire.add(connection)
        if self.sweeping is None:
            self.sweeping = loop.call_later(SWEEP_S, self._sweep)

    def _next(self, connection: Connection) -> None:
        """Give a free connection the longest-waiting request, or let it idle."""
        if self.queue:
            self._write(connection, *self.queue.popleft())
        else:
            self.idle.append(connection)

    def _finish(
        self,
        connection: Connection,
        tag: Any,
        done: Done,
        status: int,
        body: bytes,
        error: HttpError | None,
    ) -> None:
        self.wire.discard(connection)
        if error is None:
            self._next(connection)
        else:  # a failed connection is not used again; its slot opens a new one if needed
            connection.close()
            self.opened -= 1
            if self.queue and self.opened < self.limit:
                self.opened += 1
                asyncio.get_running_loop().create_task(self._open())
        done(tag, status, body, error)

    def _sweep(self) -> None:
        now = asyncio.get_running_loop().time()
        for connection in [c for c in self.wire if now - c.since > c.timeout]:
            connection.expire()
        self.sweeping = None
        if self.wire:
            self.sweeping = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    def close(self) -> None:
        if self.sweeping is not None:
            self.sweeping.cancel()
        for connection in self.idle:
            connection.close()
        self.idle.clear()
