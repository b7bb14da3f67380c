"""A small HTTP/1.1 client on asyncio protocols: keep-alive connections, Content-Length and
chunked bodies. The load generator's engine; far cheaper per request than a general client."""

from __future__ import annotations

import asyncio
from collections import deque
from urllib.parse import urlsplit


class HttpError(Exception):
    """The connection failed or the response could not be read; `kind` names how."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


class Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(HttpError("disconnected", str(exc or "")))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is None or self.waiter.done():
            return
        try:
            parsed = _parse(self.buffer)
        except HttpError as exc:
            self.waiter.set_exception(exc)
            return
        if parsed is not None:
            status, body, used = parsed
            del self.buffer[:used]
            self.waiter.set_result((status, body))

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        if self.closed:
            raise HttpError("disconnected")
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return await self.waiter

    def expire(self, timeout: float) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(HttpError("timeout", f"no response in {timeout:g}s"))

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


class Client:
    """Up to `limit` keep-alive connections to one host; a request waits for a free one (the
    wait counts in its latency, which runs from its scheduled time)."""

    def __init__(self, url: str, limit: int, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(url)
        self.headers = headers or {}
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"only http:// URLs are supported, not {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.limit = limit
        self.idle: list[Connection] = []
        self.opened = 0
        self.queue: deque[asyncio.Future[Connection | None]] = deque()

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

    async def _acquire(self) -> Connection:
        while True:
            while self.idle:
                connection = self.idle.pop()
                if not connection.closed:
                    return connection
                self.opened -= 1
            if self.opened < self.limit:
                self.opened += 1
                try:
                    _, connection = await asyncio.get_running_loop().create_connection(
                        Connection, self.host, self.port
                    )
                except OSError as exc:
                    self.opened -= 1
                    self._wake(None)
                    raise HttpError("connect", str(exc)) from None
                return connection
            turn: asyncio.Future[Connection | None] = asyncio.get_running_loop().create_future()
            self.queue.append(turn)
            handed = await turn
            if handed is not None and not handed.closed:
                return handed

    def _wake(self, connection: Connection | None) -> bool:
        """Hand `connection` (or a free slot, for None) to the longest waiter, if any."""
        while self.queue:
            turn = self.queue.popleft()
            if not turn.done():
                turn.set_result(connection)
                return True
        return False

    def _release(self, connection: Connection, healthy: bool) -> None:
        if healthy:
            if not self._wake(connection):
                self.idle.append(connection)
            return
        connection.close()
        self.opened -= 1
        self._wake(None)

    async def send(self, raw: bytes, timeout: float) -> tuple[int, bytes]:
        connection = await self._acquire()
        loop = asyncio.get_running_loop()
        healthy = False
        timer = loop.call_later(timeout, connection.expire, timeout)
        try:
            result = await connection.request(raw)
            healthy = True
            return result
        finally:
            timer.cancel()
            self._release(connection, healthy)

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()
