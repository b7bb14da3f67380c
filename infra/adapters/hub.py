"""Two tiers on one machine (`numerator up --workers N`): the HTTP workers close front frames and
hand their records to the machine's one batcher over a unix socket (`HUB`), which closes its
frames over every worker's records and sends each worker its replies back.

The worker's side is a Stream (`HubStream.put`: the records go, and return once the batcher has
taken them or TAKEN_S has passed, or raise StreamFull when it will not; a cancel is not waited
on) whose replies land in the worker's own
`MemoryReplies`; the batcher's side (`Hub`) puts what it is handed on an in-process stream, read
by its batcher as the embedded mode's, and is that batcher's Replies port: a reply goes to the
worker whose edge made its reply key.

A message is a 4-byte big-endian length, a kind byte and a body:
- HELLO (worker → batcher): the worker's edge id, first on each connection;
- PUT: a put's number (8 bytes), then its records, encoded, a line each;
- TAKEN (batcher → worker): a put's number, then nothing (taken) or why it was refused;
- REPLIES: replies, encoded, a line each;
- PING (worker → batcher), PONG: nothing, and what troubles the batcher ('' when nothing does).

A worker that loses the batcher (it died, or was stopped) cannot tell which of the records it was
waiting on were applied: it answers them 504 and takes a new edge id (`wire.new_edge`), leaving
its old one as an edge that died, so that the ledger lists the values issued to them `unsure`
(guarantee 5), and meets the restarted batcher under the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import struct
import time
from collections.abc import Callable, Sequence
from typing import cast

from infra.adapters.memory import MemoryReplies, MemoryStream
from infra.deadlines import Deadlines
from infra.errors import NumeratorError, ReplyTimeout, StreamFull, Unavailable
from infra.observe.metrics import Metrics
from infra.ports import Entry
from infra.wire import (
    BadRecord,
    Demand,
    Record,
    Reply,
    decode_record,
    decode_reply,
    edge_id,
    edge_of_key,
    encode,
)

log = logging.getLogger("numerator.hub")

HELLO, PUT, TAKEN, REPLIES, PING, PONG = b"H", b"P", b"T", b"R", b"?", b"!"
_HEAD = struct.Struct(">I")
_NUMBER = struct.Struct(">Q")
MAX_MESSAGE = 64 * 1024 * 1024
BUFFERED = 8 * 1024 * 1024
"""Bytes a side lets wait in its socket's buffer before it refuses more (a batcher that stopped
reading, a frozen worker): the puts then fail at once, StreamFull, rather than grow memory."""
RECONNECT_S = 0.1  # how often a worker tries the batcher's socket again while it is away
TAKEN_S = 1.0
"""How long a put waits to hear that the batcher took its records (it takes them at once, unless
it is frozen): then it counts them as put, and their replies' timeout runs on. Their records are
in the socket, ahead of any cancel of theirs, so a cancel still finds them."""
ROUND_S = 0.05
"""A worker that put within this long is one the batcher's frame waits for (`Hub.round`)."""
PING_S = 0.5  # how often a worker asks the batcher whether it is well
SILENT_S = 2.0  # a batcher silent this long (frozen, its loop stuck) is not well: /healthz red
LOST = "the machine's batcher went away before it replied"


class Messages(asyncio.Protocol):
    """A connection that reads and writes length-framed messages; `handle(kind, body)` takes
    each one read, `ended()` is called once the connection is gone."""

    def __init__(self, handle: Callable[[bytes, bytes], None], ended: Callable[[], None]) -> None:
        self.handle, self.ended = handle, ended
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        at = 0
        while len(buffer) - at >= 5:
            (size,) = _HEAD.unpack_from(buffer, at)
            if size > MAX_MESSAGE:
                log.error("a message of %d bytes on the hub's socket: closing it", size)
                self.close()
                return
            if len(buffer) - at - 4 < size:
                break
            kind = bytes(buffer[at + 4 : at + 5])
            body = bytes(buffer[at + 5 : at + 4 + size])
            at += 4 + size
            self.handle(kind, body)
        del buffer[:at]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.ended()

    def send(self, kind: bytes, body: bytes, always: bool = False) -> bool:
        """Write one message; False when the connection is gone or (unless `always`) its buffer
        is full."""
        transport = self.transport
        if transport is None or self.gone:
            return False
        if not always and transport.get_write_buffer_size() > BUFFERED:
            return False
        transport.write(_HEAD.pack(len(body) + 1) + kind + body)
        return True

    @property
    def gone(self) -> bool:
        """Whether the connection is closed or closing (its end not yet told)."""
        transport = self.transport
        return transport is None or transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class HubStream:
    """A worker's stream: its records go to the machine's batcher. `replies` receives theirs;
    `lost(waited, untaken)` is called when the batcher goes away with records in doubt (the
    edge takes a new id)."""

    name = "hub"
    durable = False
    reads = None

    def __init__(self, path: str, replies: MemoryReplies, lost: Callable[[int, int], None]) -> None:
        self.path, self.replies, self.lost = path, replies, lost
        self._link: Messages | None = None
        self._numbers = itertools.count(1)
        self._taking: dict[int, asyncio.Future[str]] = {}
        self._keys: dict[int, list[str]] = {}  # the reply keys of each put in `_taking`
        self._expiring = Deadlines(self._taking.get)  # TAKEN_S, swept (infra/deadlines.py)
        self._answered: asyncio.Future[None] | None = None  # a new link's first PONG
        self._keeping: asyncio.Task[None] | None = None
        self._closing = False
        self.connected = asyncio.Event()
        self.heard = 0.0  # monotonic time of the batcher's last PONG
        self.trouble = ""  # what troubles the batcher, as its last PONG said

    async def open(self, patience: float = 0.0) -> None:
        """Keep a connection to the batcher from now on; wait up to `patience` seconds for the
        first (the batcher starts beside the workers)."""
        self._keeping = asyncio.create_task(self._keep(), name="hub-link")
        if patience:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(patience):
                    await self.connected.wait()

    async def close(self) -> None:
        self._closing = True  # a worker that stops: its link ends, and nothing is lost
        link = self._link  # taken first: the link keeper's end forgets it
        if self._keeping is not None:
            self._keeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeping
        if link is not None:
            link.close()

    async def _keep(self) -> None:
        loop = asyncio.get_running_loop()
        since: float | None = None  # when the tries to connect began failing
        said = False
        while True:
            gone = asyncio.Event()
            try:
                _, link = await loop.create_unix_connection(
                    functools.partial(Messages, self._handle, gone.set), self.path
                )
            except OSError as exc:
                since = loop.time() if since is None else since
                if not said and loop.time() - since >= SILENT_S:  # not while it starts
                    log.warning("waiting for the machine's batcher at %s: %s", self.path, exc)
                    said = True
                await asyncio.sleep(RECONNECT_S)
                continue
            since, said = None, False
            link.send(HELLO, edge_id().encode())
            if not await self._answers(link, gone):
                continue
            self._link = link
            self.heard = loop.time()
            self.connected.set()
            pinging = asyncio.create_task(self._ping(link), name="hub-ping")
            try:
                await gone.wait()
            finally:
                pinging.cancel()
                self._link = None
                self.connected.clear()
                self._lose()

    async def _answers(self, link: Messages, gone: asyncio.Event) -> bool:
        """Whether the batcher at the end of a new connection answers a PING within SILENT_S:
        only then is anything put on it. A dying batcher's listener takes connections into its
        backlog for a moment after its workers' links have ended; a worker that put on one at
        once lost those records too, and took its new edge for dead as well (unsure values
        listed twice). One that does not answer is closed, and tried again later."""
        answered = self._answered = asyncio.get_running_loop().create_future()
        ended = asyncio.ensure_future(gone.wait())
        try:
            link.send(PING, b"", always=True)
            await asyncio.wait((answered, ended), timeout=SILENT_S, return_when="FIRST_COMPLETED")
        except asyncio.CancelledError:  # the worker stops: its link is not kept yet, so it goes
            link.close()
            raise
        finally:
            ended.cancel()
            self._answered = None
        if answered.done():
            return True
        link.close()
        await asyncio.sleep(RECONNECT_S)
        return False

    async def _ping(self, link: Messages) -> None:
        while True:
            await asyncio.sleep(PING_S)
            link.send(PING, b"", always=True)

    def unwell(self) -> str | None:
        """Why the batcher cannot serve this worker now, or None (for /healthz)."""
        if not self.connected.is_set():
            return f"not connected to the machine's batcher at {self.path}"
        silent = asyncio.get_running_loop().time() - self.heard
        if silent > SILENT_S:
            return f"the machine's batcher has not answered for {silent:.1f} s"
        return self.trouble or None

    def _lose(self) -> None:
        """The batcher went away: refuse the puts it had not taken, time out every reply awaited
        (whether their records were applied no one here can tell), and, if any were, say so
        (`lost`: the edge takes a new id). A connection that ends with nothing in doubt (a
        batcher that answered, then went before anything was put) costs nothing; one whose
        batcher never answered is not kept, and does not come here (`_answers`)."""
        taking = list(self._taking.values())
        untaken = {key for keys in self._keys.values() for key in keys}
        self._taking.clear()  # the same dict: `_expiring` finds the puts in it
        self._keys.clear()
        for future in taking:
            if not future.done():
                future.set_exception(Unavailable("the machine's batcher went away"))
                future.exception()  # retrieved here: its put may have stopped waiting
        waited = self.replies.drop(ReplyTimeout(LOST), but=untaken)
        if not self._closing and (waited or taking):
            self.lost(waited, len(taking))

    def _handle(self, kind: bytes, body: bytes) -> None:
        if kind == REPLIES:
            replies = []
            for line in body.split(b"\n"):
                try:
                    replies.append(decode_reply(line))
                except ValueError as exc:  # BadReply: not one of ours
                    log.error("an unreadable reply from the machine's batcher: %s", exc)
            self.replies.deliver(replies)
        elif kind == TAKEN:
            (number,) = _NUMBER.unpack_from(body)
            future = self._taking.pop(number, None)
            if future is not None and not future.done():
                future.set_result(body[_NUMBER.size :].decode())
        elif kind == PONG:
            self.heard = asyncio.get_running_loop().time()
            self.trouble = body.decode()
            if self._answered is not None and not self._answered.done():
                self._answered.set_result(None)

    async def put(self, records: Sequence[Demand], shard: str | None = None) -> None:
        link = self._link
        if link is None:
            raise Unavailable("the machine's batcher is not reachable (it is starting again)")
        if link.gone:  # it went this moment: its end is told a turn of the loop later
            raise Unavailable("the machine's batcher went away")
        number = next(self._numbers)
        body = _NUMBER.pack(number) + b"\n".join(encode(record) for record in records)
        if not any(isinstance(record, Record) for record in records):
            # A cancel (or a void) always goes, and is not waited on: it may be what voids values
            # already taken, and an edge that gives up on a request answers it once it is put.
            link.send(PUT, body, always=True)
            return
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._taking[number] = future
        if not link.send(PUT, body):
            self._taking.pop(number, None)
            raise StreamFull("the machine's batcher is not taking records as fast as they come")
        self._keys[number] = [record.key for record in records]
        timer = self._expiring.add(loop, number, TAKEN_S)
        try:
            refused = await future  # a put cancelled stays in `_taking`: in doubt if it is lost
        except ReplyTimeout:  # a frozen batcher: counted as put (TAKEN_S)
            self._taking.pop(number, None)
            return
        finally:
            self._keys.pop(number, None)
            if timer is not None:
                timer.cancel()
        if refused:
            raise StreamFull(refused)

    async def shards(self) -> dict[str, tuple[str, ...]]:
        return {}

    async def read(self, shard: str, after: str | None, limit: int, wait: float) -> list[Entry]:
        raise NumeratorError("a worker's stream is put to, not read: its batcher reads the hub")

    def lag(self, shard: str) -> float | None:
        return None


class Hub:
    """The machine's batcher's side: a unix socket its workers connect to; what they put goes on
    `stream`, and this is the batcher's Replies port, sending each reply to its worker."""

    def __init__(
        self,
        path: str,
        stream: MemoryStream,
        metrics: Metrics,
        trouble: Callable[[], str] = str,
    ) -> None:
        """`trouble`: what troubles the batcher now ('' when nothing), told to the workers."""
        self.path, self.stream, self.metrics, self.trouble = path, stream, metrics, trouble
        self.edges: dict[str, Messages] = {}
        self._server: asyncio.AbstractServer | None = None
        self._puts: dict[str, float] = {}  # each worker's last put taken (monotonic time)
        self._put = asyncio.Event()
        stream.round = self.round

    async def open(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a killed batcher's: nothing listens on it any more
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(self._connected, self.path)
        os.chmod(self.path, 0o600)  # this user's workers only

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self.edges.values()):
            link.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def _connected(self) -> Messages:
        edge = [""]  # what HELLO names

        def handle(kind: bytes, body: bytes) -> None:
            if kind == PUT:
                (number,) = _NUMBER.unpack_from(body)
                refused = self._take(body[_NUMBER.size :])
                if not refused:
                    self._puts[edge[0]] = time.monotonic()
                    self._put.set()
                if not link.send(TAKEN, _NUMBER.pack(number) + refused.encode()):
                    link.close()  # a worker that stopped reading: it loses this batcher
            elif kind == PING:
                link.send(PONG, self.trouble().encode(), always=True)
            elif kind == HELLO:
                edge[0] = body.decode()
                self.edges[edge[0]] = link

        def ended() -> None:
            if self.edges.get(edge[0]) is link:
                del self.edges[edge[0]]
            self._puts.pop(edge[0], None)

        link = Messages(handle, ended)
        return link

    async def round(self, since: float, until: float) -> None:
        """Return once every worker that put within ROUND_S has put since `since`, or at
        `until` (monotonic times): a frame then holds a front frame of each busy worker, and
        the transactions do not multiply with the workers, each front frame that finds the
        batcher idle a transaction of its own."""
        while True:
            now = time.monotonic()
            waiting = any(now - ROUND_S < put <= since for put in self._puts.values())
            if not waiting or now >= until:
                return
            self._put.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._put.wait(), until - now)

    def _take(self, body: bytes) -> str:
        """Put a worker's records on the stream: '' when taken, else why not (nothing is put)."""
        try:
            records = [decode_record(line) for line in body.split(b"\n")]
        except BadRecord as exc:  # the workers encode what they put: a bug, said at once
            log.error("a worker put a record that does not decode: %s", exc)
            return f"the machine's batcher could not read a record: {exc}"
        try:
            self.stream.put_now(records)
        except StreamFull as exc:
            return str(exc)
        return ""

    # The batcher's Replies port: it publishes, and never awaits a reply.

    def expect(self, key: str) -> None:
        return None

    def forget(self, key: str) -> None:
        return None

    async def publish(self, replies: Sequence[Reply]) -> None:
        by_edge: dict[str, list[Reply]] = {}
        for reply in replies:
            by_edge.setdefault(edge_of_key(reply.key), []).append(reply)
        for edge, some in by_edge.items():
            link = self.edges.get(edge)
            if link is not None and not link.send(REPLIES, b"\n".join(encode(r) for r in some)):
                link.close()  # a worker that stopped reading: it loses this batcher, as above
                link = None
            if link is None:
                # Its worker is gone: the values are listed unsure under its edge, which died,
                # or took a new edge id when it lost this batcher (answering its requests 504).
                self.metrics.replies_abandoned.inc(sum(r.error is None for r in some))

    async def wait(self, key: str, timeout: float) -> Reply:
        raise ReplyTimeout("the machine's batcher awaits no replies")
