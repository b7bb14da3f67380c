"""Pushed replies (infra/adapters/push.py, infra/adapters/pushkeys.py): only what a push key
signed for this inbox is taken, a record names its inbox's address and nothing to sign with,
and a frame's replies go to the inbox their record named."""

from __future__ import annotations

import asyncio
import socket
from datetime import date

import pytest

from infra.adapters.push import MAX_PAYLOAD, Inbox, Pusher, payloads, target
from infra.adapters.pushkeys import KEY_ID, PushKeys, new_key, parsed
from infra.errors import SettingsError
from infra.ports import Entry
from infra.settings import Settings
from infra.wire import Record, Reply, decode_record, decode_reply, encode

KEY, OLD, OTHER = (new_key().encode() for _ in range(3))
TO = "10.0.0.5:4000"


def test_a_payload_opens_with_a_key_that_signed_it_for_this_inbox_and_no_other() -> None:
    datagram = PushKeys([KEY]).sign(TO, b"replies")
    assert PushKeys([KEY]).opened(TO, datagram) == b"replies"
    assert PushKeys([OTHER]).opened(TO, datagram) is None  # a key the edge does not hold
    assert PushKeys([KEY]).opened("10.0.0.5:4001", datagram) is None  # sent to another inbox
    assert PushKeys([KEY]).opened(TO, datagram[:-1] + b"X") is None  # a byte changed
    assert PushKeys([KEY]).opened(TO, b"short") is None
    forged = datagram[:KEY_ID] + bytes(32) + b"replies"  # the right key's id, a made-up MAC
    assert PushKeys([KEY]).opened(TO, forged) is None


def test_a_rotation_signs_with_the_new_key_and_accepts_the_old_one_while_it_is_held() -> None:
    edge, batcher = PushKeys([KEY]), PushKeys([KEY])
    edge.replace([KEY, OLD])  # the new key rolled out to the edges first: accepted, not used
    assert edge.opened(TO, batcher.sign(TO, b"a")) == b"a"
    batcher.replace([OLD, KEY])  # a batcher signs with it, the edge still takes both
    assert edge.opened(TO, batcher.sign(TO, b"b")) == b"b"
    assert edge.opened(TO, PushKeys([KEY]).sign(TO, b"c")) == b"c"  # a batcher not yet moved
    edge.replace([OLD])  # the retired key dropped: what it signs is refused
    assert edge.opened(TO, PushKeys([KEY]).sign(TO, b"d")) is None
    assert edge.ids == [PushKeys([OLD]).ids[0]]


def test_push_keys_are_refused_when_short_and_never_shown() -> None:
    with pytest.raises(SettingsError, match="PUSH_KEYS: each key must be at least 32"):
        Settings.from_env({"PUSH_KEYS": "short"})
    with pytest.raises(SettingsError, match="PUSH_KEYS: each key must be at least 32"):
        Settings.from_env({"PUSH_KEYS": f"{KEY.decode()},short"})
    with pytest.raises(SettingsError, match="PUSH_KEYS: set it or PUSH_KEY_SECRET_ARN"):
        Settings.from_env({"PUSH_KEYS": KEY.decode(), "PUSH_KEY_SECRET_ARN": "arn:x"})
    settings = Settings.from_env({"PUSH_KEYS": f"{KEY.decode()}, {OLD.decode()}"})
    assert parsed(settings.aws.push_keys) == [KEY, OLD]
    assert KEY.decode() not in repr(settings)  # a settings line in a log names no key


def test_a_target_names_an_ipv4_address_and_a_port_or_none() -> None:
    assert target(TO) == ("10.0.0.5", 4000)
    for bad in (
        "",
        "10.0.0.5",  # no port
        "10.0.0.5:0",
        "10.0.0.5:70000",
        "example.com:4000",  # names, not addresses: nothing is looked up
        "::1:4000",
        "10.0.0.5:4000/" + "ab" * 16,  # an older edge's, with its token: not pushed to
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
    record = Record("e-1", "c", 2, None, 5.0, 4.0, "", "127.0.0.1:4000")
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

    keys = PushKeys([KEY])
    inbox, other = Inbox(take, "127.0.0.1", keys), Inbox(lambda lines: 0, "127.0.0.1", keys)
    to, elsewhere = await inbox.open(), await other.open()
    try:
        ours = [Record(f"e-{i}", "c", 1, None, 0.0, 0.0, "", to) for i in range(3)]
        theirs = Record("f-1", "c", 1, None, 0.0, 0.0, "", elsewhere)
        plain = Record("g-1", "c")  # the Lambda edge's: no inbox
        entries = [Entry("s", str(i), r) for i, r in enumerate([*ours, theirs, plain])]
        day = date(2026, 12, 3)
        records = [*ours, theirs, plain]
        replies = [Reply(r.key, "c", i + 1, i + 1, day=day) for i, r in enumerate(records)]
        assert Pusher(None).send(entries, replies) == 0  # no keys: nothing pushed
        assert Pusher(keys).send(entries, replies) == 2  # one datagram an inbox
        for _ in range(100):
            if len(found) == 3 and other.received + other.dropped == 1:
                break
            await asyncio.sleep(0.01)
        assert [decode_reply(line) for line in found] == replies[:3]
        # a datagram signed with a key the inbox does not hold, or for another inbox, is dropped
        host, port = to.split(":")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            out.sendto(PushKeys([OTHER]).sign(to, encode(replies[0])), (host, int(port)))
            out.sendto(keys.sign(elsewhere, encode(replies[1])), (host, int(port)))
        for _ in range(100):
            if inbox.dropped == 2:
                break
            await asyncio.sleep(0.01)
        assert inbox.dropped == 2 and len(found) == 3
    finally:
        inbox.close()
        other.close()
