"""One HTTP/1.1 request on a connection of its own, which its client may cut at a given moment —
exactly, so that afterwards it is known whether the answer had gone out: what the soak's clients
and the tests' recorded histories (tests/history.py) send.

At its cut the client half-closes the connection (the server reads the end of the stream: its
client left) and reads on until the server closes. granian closes at once a connection whose
client left, and writes nothing after, so an answer read after the half-close was written before
the server could know: it crossed the client's leaving, and the service rightly counts it
delivered. A client that closed outright would drop those bytes unread, and the request would
look cut to its client and answered to the service — a value lost that no service can see, which
a history would wrongly hold against it (it did: a keyed request's last try, cut 238 ms in, as
its replayed answer was being sent)."""

from __future__ import annotations

import asyncio
import contextlib
import select
import time
from dataclasses import dataclass

CONNECT_S = 5.0
CROSSING_S = 0.1
"""An answer that comes this soon after the half-close crossed the client's leaving; one that
comes later was written after the server could have read it, and the request counts as cut."""


@dataclass
class Exchange:
    """One request as its client saw it. Times are `time.monotonic()` but `wall`."""

    sent: float
    wall: float  # time.time() when it was sent
    ended: float = 0.0  # when its answer was read, or it was cut
    raw: bytes = b""  # the whole answer, to the connection's end; b"" if none
    cut_s: float | None = None  # it was cut this long after it was sent (no answer read)
    crossed: bool = False  # its answer came after the cut, written before the server knew


def request(port: int, path: str, headers: dict[str, str] | None = None) -> bytes:
    """A POST of `path` without a body, that asks the server to close the connection after."""
    head = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Length: 0"]
    head.append("Connection: close")
    head += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode()


async def exchange(port: int, raw: bytes, cut: float | None, timeout: float) -> Exchange:
    """Send `raw` to 127.0.0.1:`port` and read the answer, or cut the request `cut` seconds
    after sending it, when no byte of its answer has come by then. Raises TimeoutError (no
    answer within `timeout`) and OSError (the connection failed)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), CONNECT_S)
    try:
        out = Exchange(time.monotonic(), time.time())
        writer.write(raw)
        await writer.drain()
        reading = asyncio.ensure_future(reader.read(65536))
        done, _ = await asyncio.wait([reading], timeout=timeout if cut is None else cut)
        if not done and cut is not None and not waiting(writer):
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            out.cut_s = time.monotonic() - out.sent
            out.raw = await crossing(reader, writer)
            out.crossed, out.ended = bool(out.raw), time.monotonic()
            if out.crossed:
                out.cut_s = None
            return out
        if not done and cut is None:
            reading.cancel()
            raise TimeoutError(f"no answer within {timeout:g} s")
        out.raw = await asyncio.wait_for(reading, timeout)
        if out.raw:  # the rest, to the end: Connection: close
            out.raw += await asyncio.wait_for(reader.read(), timeout)
        out.ended = time.monotonic()
        return out
    finally:
        writer.close()


async def crossing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """Half-close the connection and read what comes before the server closes it: an answer
    that crossed the client's leaving (within CROSSING_S), else nothing."""
    with contextlib.suppress(OSError):
        writer.write_eof()
    try:
        first = await asyncio.wait_for(reader.read(65536), CROSSING_S)
    except (TimeoutError, OSError):
        return b""
    if not first:
        return b""
    try:
        return first + await asyncio.wait_for(reader.read(), 5.0)
    except (TimeoutError, OSError):
        return b""  # an answer cut short is none


def waiting(writer: asyncio.StreamWriter) -> bool:
    """Whether a byte of the answer (or the server's close) waits in the socket: then the
    answer went out before the cut, and the client reads it."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return False
    readable, _, _ = select.select([sock.fileno()], [], [], 0)
    return bool(readable)


def answer(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """The status, headers (names in lower case) and body (unchunked) of a whole answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", ""):
        body = unchunk(body)
    return status, headers, body


def unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        n = int(size.split(b";")[0], 16)
        if n == 0:
            break
        out, body = out + rest[:n], rest[n + 2 :]
    return out
