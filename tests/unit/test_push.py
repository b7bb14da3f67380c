"""Pushed replies (infra/adapters/push.py): only what was signed with the edge's token is taken,
a record's inbox survives the wire, and a frame's replies go to the inbox their record named."""

from __future__ import annotations

import asyncio
import socket
from datetime import date

from infra.adapters.push import (
    MAX_PAYLOAD,
    Inbox,
    Pusher,
    opened,
    payloads,
    sign,
    target,
)
from infra.ports import Entry
from infra.wire import Record, Reply, decode_record, decode_reply, encode

TOKEN = bytes(range(16))


def test_a_payload_opens_with_its_token_and_with_no_other() -> None:
    datagram = sign(TOKEN, b"replies")
    assert opened(TOKEN, datagram) == b"replies"
    assert opened(bytes(16), datagram) is None  # another edge's token
    assert opened(TOKEN, datagram[:-1] + b"X") is None  # a byte of the payload changed
    assert opened(TOKEN, b"short") is None


def test_a_target_names_an_ipv4_address_a_port_and_a_token_of_16_bytes_or_none() -> None:
    assert target(f"10.0.0.5:4000/{TOKEN.hex()}") == ("10.0.0.5", 4000, TOKEN)
    for bad in (
        "",
        "10.0.0.5:4000",  # no token
        f"10.0.0.5/{TOKEN.hex()}",  # no port
        f"10.0.0.5:0/{TOKEN.hex()}",
        f"10.0.0.5:70000/{TOKEN.hex()}",
        f"example.com:4000/{TOKEN.hex()}",  # names, not addresses: nothing is looked up
        f"::1:4000/{TOKEN.hex()}",
        "10.0.0.5:4000/abcd",  # a token too short to keep a guesser out
        "10.0.0.5:4000/not-hex",
    ):
        assert target(bad) is None, bad


def test_payloads_keep_every_line_in_order_and_stay_under_the_limit() -> None:
    lines = [bytes([65 + i % 26]) * (100 + i) for i in range(200)]
    out = payloads(lines)
    assert len(out) > 1 and all(len(p) <= MAX_PAYLOAD for p in out)
    assert [line for p in out for line in p.split(b"\n")] == lines
    long = b"x" * (MAX_PAYLOAD + 10)  # a reply longer than a datagram goes alone, whole
    assert payloads([b"a", long, b"b"]) == [b"a", long, b"b"] and payloads([]) == []


def test_a_record_names_its_inbox_on_the_wire_and_one_that_is_not_text_is_dropped() -> None:
    record = Record("e-1", "c", 2, None, 5.0, 4.0, "", "127.0.0.1:4000/" + TOKEN.hex())
    assert decode_record(encode(record)) == record
    assert "t" not in Record("e-2", "c").to_json()
    raw = b'{"v":1,"k":"e-3","c":"c","n":1,"d":5.0,"s":4.0,"t":[1]}'
    got = decode_record(raw)
    assert isinstance(got, Record) and got.to == ""


async def test_a_frame_s_replies_reach_the_inbox_their_records_named_and_no_other() -> None:
    found: list[bytes] = []

    def take(lines: list[bytes]) -> int:
        found.extend(lines)
        return len(lines)

    inbox, other = Inbox(take, "127.0.0.1"), Inbox(lambda lines: 0, "127.0.0.1")
    to, elsewhere = await inbox.open(), await other.open()
    try:
        ours = [Record(f"e-{i}", "c", 1, None, 0.0, 0.0, "", to) for i in range(3)]
        theirs = Record("f-1", "c", 1, None, 0.0, 0.0, "", elsewhere)
        plain = Record("g-1", "c")  # the Lambda edge's: no inbox
        entries = [Entry("s", str(i), r) for i, r in enumerate([*ours, theirs, plain])]
        day = date(2026, 12, 3)
        records = [*ours, theirs, plain]
        replies = [Reply(r.key, "c", i + 1, i + 1, day=day) for i, r in enumerate(records)]
        assert Pusher().send(entries, replies) == 2  # one datagram an inbox
        for _ in range(100):
            if len(found) == 3 and other.received + other.dropped == 1:
                break
            await asyncio.sleep(0.01)
        assert [decode_reply(line) for line in found] == replies[:3]
        # a datagram not signed with the inbox's token answers nothing
        host, port = to.split("/")[0].split(":")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            out.sendto(sign(bytes(16), encode(replies[0])), (host, int(port)))
        for _ in range(100):
            if inbox.dropped:
                break
            await asyncio.sleep(0.01)
        assert inbox.dropped == 1 and len(found) == 3
    finally:
        inbox.close()
        other.close()
