"""The wire format: records and replies survive encoding; bad records are named, not crashed on."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infra.wire import (
    BadRecord,
    BadReply,
    Confirm,
    Record,
    Reply,
    ReplyError,
    Void,
    decode_record,
    decode_reply,
    encode,
)

records = st.builds(
    Record,
    key=st.text(min_size=1, max_size=40),
    counter=st.text(min_size=1, max_size=40),
    count=st.integers(min_value=1, max_value=1000),
    idempotency_key=st.none() | st.text(max_size=40),
    deadline=st.floats(min_value=0, max_value=2e9),
    sent=st.floats(min_value=0, max_value=2e9),
)


@given(records)
def test_record_round_trip(record: Record) -> None:
    assert decode_record(encode(record)) == record


def test_reply_round_trip() -> None:
    ok = Reply("k", "inv", 5, 9, "INV-{value}", date(2026, 1, 2))
    bad = Reply("k", "inv", error=ReplyError.COUNTER_NOT_FOUND, detail="no such counter")
    assert decode_reply(encode(ok)) == ok
    assert decode_reply(encode(bad)) == bad


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (b"not json", None),
        (b"[]", None),
        (b'{"c": "inv"}', None),
        (b'{"k": "r1"}', "r1"),
        (b'{"k": "r1", "c": "inv", "n": 0, "d": 1}', "r1"),
        (b'{"k": "r1", "c": "inv", "n": 1000001, "d": 1}', "r1"),
        (b'{"k": "r1", "c": "inv", "n": true, "d": 1}', "r1"),
        (b'{"k": "r1", "c": "inv", "n": 1, "d": "soon"}', "r1"),
        (b'{"k": "r1", "c": "inv", "n": 1, "d": 1, "i": 5}', "r1"),
        (b'{"v": 2, "k": "r1", "c": "inv", "n": 1, "d": 1}', None),
    ],
)
def test_bad_records_raise_bad_record_with_the_key_when_known(raw: bytes, key: str | None) -> None:
    with pytest.raises(BadRecord) as caught:
        decode_record(raw)
    assert caught.value.key == key


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"v": 2, "k": "r1", "c": "inv", "f": 1, "l": 1, "t": "{value}", "y": "2026-01-01"}',
        b'{"v": 1, "k": "r1", "c": "inv", "e": "a-new-kind-of-error", "m": ""}',
        b'{"v": 1, "k": "r1", "c": "inv", "f": 1}',
    ],
)
def test_unreadable_replies_raise_bad_reply(raw: bytes) -> None:
    with pytest.raises(BadReply):
        decode_reply(raw)


def test_every_record_and_reply_carries_the_wire_version() -> None:
    assert encode(Record("k", "inv")).startswith(b'{"v":1,')
    assert encode(Reply("k", "inv", error=ReplyError.EXPIRED)).startswith(b'{"v":1,')


def test_a_forked_child_makes_reply_keys_and_an_edge_of_its_own() -> None:
    """Guarantee 1: granian forks its workers after this module is imported; each must draw its
    own prefix, or two workers' keys collide in the one reply table."""
    import os

    from infra.wire import edge_id, reply_key

    before = reply_key()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: say its edge and its first key, then leave at once
        os.write(write, f"{edge_id()} {reply_key()}".encode())
        os._exit(0)
    os.close(write)
    said = os.read(read, 200).decode().split()
    os.waitpid(child, 0)
    assert said[0] != edge_id() and said[0] != before.rpartition("-")[0]
    assert said[1].startswith(said[0] + "-") and said[1] != reply_key()


def test_a_long_running_edges_keys_say_it_reads_its_replies_a_frame_at_a_time() -> None:
    """A process that calls read_grouped (a long-running edge) makes keys the batcher groups by
    edge, and so do the children it forks; a Lambda container's (the default) are not grouped."""
    import os

    from infra.wire import edge_id, edge_of_key, grouped, read_grouped, reply_key

    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a fresh process: keys as a Lambda container makes them, then grouped
        import infra.wire

        infra.wire._GROUPED = False  # as a process that never read grouped (this one may have)
        infra.wire._draw()
        before = reply_key()
        read_grouped()
        after = reply_key()
        forked = os.fork()
        if forked == 0:
            os.write(write, f"{before} {after} {edge_id()} {reply_key()}".encode())
            os._exit(0)
        os.waitpid(forked, 0)
        os._exit(0)
    os.close(write)
    before, after, edge, child_key = os.read(read, 400).decode().split()
    os.waitpid(child, 0)
    assert not grouped(before) and grouped(after) and grouped(child_key)
    assert edge_of_key(child_key) == edge and len(edge) == len(edge_of_key(before)) == 16
    assert edge_of_key(after) != edge_of_key(before), "a prefix of its own, drawn again"


def test_a_traced_record_carries_its_traceparent_and_an_untraced_one_nothing() -> None:
    """`tp` is on the wire only when the edge traces; a record without it (an edge that does
    not trace, or one older than traces) reads as it always did."""
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    traced = Record("k-1", "inv", 1, trace=parent)
    assert traced.to_json()["tp"] == parent
    assert decode_record(encode(traced)) == traced
    plain = Record("k-2", "inv")
    assert "tp" not in plain.to_json()
    old = b'{"v": 1, "k": "k-3", "c": "inv", "n": 2, "d": 0, "s": 0}'
    assert decode_record(old) == Record("k-3", "inv", 2)
    odd = b'{"v": 1, "k": "k-4", "c": "inv", "n": 1, "d": 0, "s": 0, "tp": 7}'
    assert decode_record(odd) == Record("k-4", "inv")  # a trace it cannot read is no trace


def test_a_confirmation_travels_as_itself_not_as_a_void() -> None:
    """A Confirm is no Void (issue 53): it has no reason, and decodes to a Confirm."""
    confirm = Confirm("k1", "inv", 3, 4, period="2026", who="key:a", day=date(2026, 1, 2))
    assert "r" not in confirm.to_json() and confirm.to_json()["o"] == "confirm"
    back = decode_record(encode(confirm))
    assert back == confirm and not isinstance(back, Void)
    void = decode_record(encode(Void("k2", "inv", 3, 4, "typo")))
    assert isinstance(void, Void) and void.reason == "typo"
