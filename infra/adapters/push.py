"""Replies pushed to the edge that waits for them: a datagram from the batcher after the commit.

A long-running edge on the AWS path (the server edge's workers) reads its replies from the reply
table a lag after its records' beat (infra/adapters/dynamodb.py); the batcher that committed
them knew them some 25 ms sooner, before its reply write and the edge's read. So each server
edge process opens an `Inbox`, a UDP socket, and names its address in every record it puts
(`Record.to`: "host:port"); the batcher, once a frame has committed, sends each such edge its
replies of the frame (`Pusher`), signed with the push key (infra/adapters/pushkeys.py) and bound
to that address, and then writes the table as before. The edge answers a waiting key from the
first that comes; the table's copy is read for the keys no push answered, so a datagram lost,
late, refused by a firewall or never sent (an heir publishing again, a batcher of an older
version, a batcher without the key) costs a request the table's lag and nothing more; and a
reply stays findable by its key alone, for a retry, a takeover or an heir, for as long as the
table keeps it.

Only what the batcher committed is pushed, and only to the edge whose record asked; a datagram
not signed with a push key for this inbox is dropped. The key is shared by the batchers and the
edges out of band and never travels in a record: whoever reads the stream (an analytics
consumer, a Firehose, a replay tool) learns the inboxes' addresses and nothing that lets it
answer one (docs/architecture.md, "Who can forge what").
The Lambda edge does not take pushes (its containers cannot receive): its records name no inbox.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from infra.adapters.pushkeys import DIGEST, KEY_ID, PushKeys
from infra.ports import Entry
from infra.wire import Record, Reply, bounded, encode

log = logging.getLogger("numerator.push")

MAX_PAYLOAD = 1_400 - KEY_ID - DIGEST
"""A datagram's replies: with the key's id, the digest and the IP and UDP headers, one Ethernet
frame (1,500 bytes), so that no datagram is fragmented (a path that drops fragments, or one
fragment lost, would lose it whole). A front frame's replies to one edge are one a counter,
about 150 bytes each; a reply longer than this alone goes in a datagram of its own."""
WARN_EVERY_S = 5.0
ANY_ROUTE = ("192.0.2.1", 9)  # TEST-NET-1: a UDP connect to it picks the host's outward address


def outward() -> str:
    """This host's address as other hosts on its network reach it (the one its default route
    leaves from; no packet is sent), or 127.0.0.1 where it has no route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(ANY_ROUTE)
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def target(to: str) -> tuple[str, int] | None:
    """The (host, port) of a record's `to` ("host:port"), or None if it names none that can be
    sent to (an edge of an older version named a token after a slash: never pushed to)."""
    host, colon, port = to.rpartition(":")
    if not (colon and port.isdigit() and 0 < int(port) < 65_536):
        return None
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return None
    return host, int(port)


def payloads(lines: Sequence[bytes]) -> list[bytes]:
    """The lines, newline-joined, in runs of at most MAX_PAYLOAD bytes (a line longer alone)."""
    return [b"\n".join(run) for run in bounded(lines, MAX_PAYLOAD)]


class Inbox(asyncio.DatagramProtocol):
    """An edge process's UDP socket for pushed replies: each signed line goes to `found`."""

    def __init__(
        self,
        found: Callable[[list[bytes]], int],
        host: str,
        keys: PushKeys,
        dropped: Callable[[], object] = lambda: None,
    ) -> None:
        """`found`: answers the waits of the reply lines given, and says how many it answered;
        `host`: the address to take pushes at (and to name in records); `keys`: the push keys
        a datagram must be signed with; `dropped`: called for each datagram that is not."""
        self.found, self.host, self.keys, self._dropped = found, host, keys, dropped
        self.to = ""  # what records name: "host:port", once open
        self.received = self.dropped = 0
        self._transport: asyncio.DatagramTransport | None = None

    async def open(self) -> str:
        """Bind a port of `host`; what records are to name."""
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: self, local_addr=(self.host, 0))
        self._transport = transport
        port = transport.get_extra_info("sockname")[1]
        self.to = f"{self.host}:{port}"
        return self.to

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        payload = self.keys.opened(self.to, data)
        if payload is None:
            self.dropped += 1
            self._dropped()
            return
        self.received += self.found(payload.split(b"\n"))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        self.to = ""


class Pusher:
    """The batcher's side: after a frame commits, its replies to each edge that named an inbox,
    as signed datagrams. Sending never waits and never fails a frame: a datagram the socket
    cannot take is left to the table. A socket a frame (opened only for a frame that pushes),
    so that nothing is left open when a batcher goes."""

    def __init__(self, keys: PushKeys | None) -> None:
        """`keys`: what datagrams are signed with; None (yet): nothing is pushed."""
        self.keys = keys
        self._warned = -WARN_EVERY_S

    def send(self, entries: Iterable[Entry], replies: Sequence[Reply]) -> int:
        """Push `replies` (a committed frame's) to the inboxes their records named; how many
        datagrams went."""
        keys = self.keys
        if keys is None:
            return 0
        to = {
            e.record.key: e.record.to
            for e in entries
            if isinstance(e.record, Record) and e.record.to
        }
        if not to:
            return 0
        lines: defaultdict[str, list[bytes]] = defaultdict(list)
        for reply in replies:
            where = to.get(reply.key)
            if where:
                lines[where].append(encode(reply))
        went = 0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            out.setblocking(False)
            for where, group in lines.items():
                place = target(where)
                if place is None:
                    continue
                for payload in payloads(group):
                    went += self._send(out, keys.sign(where, payload), place)
        return went

    def _send(self, out: socket.socket, datagram: bytes, address: tuple[str, int]) -> int:
        try:
            out.sendto(datagram, address)
            return 1
        except OSError as exc:  # a full buffer, no route: the table answers
            now = time.monotonic()
            if now - self._warned >= WARN_EVERY_S:
                log.warning("could not push replies to %s:%d: %s", *address, exc)
                self._warned = now
            return 0
