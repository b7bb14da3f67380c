"""The history checker (tests/history.py) on small hand-made histories: a sound one passes, and
each rule fails on a history that breaks it (a checker that cannot fail proves nothing)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from tests.history import Attempt, Records, check, parse

OK = {"ok": True, "rows": 3, "chains": 1, "heads": {}}


def got(
    counter: str, values: list[int], sent: float, ended: float, key: str | None = None
) -> Attempt:
    return Attempt(
        counter, len(values), key, sent, ended, 200, tuple(values), counter, "application/json"
    )


def cut(counter: str, ms: float, sent: float, key: str | None = None, count: int = 1) -> Attempt:
    return Attempt(counter, count, key, sent, sent + ms / 1000, cut_ms=ms)


def records(
    last: int,
    keys: dict[int, str] | None = None,
    void: tuple[tuple[int, int, str], ...] = (),
    doubt: tuple[tuple[int, int], ...] = (),
    **change: Any,
) -> Records:
    """A counter's records, consistent with themselves: values 1..last issued one per row."""
    keys = keys or {}
    unsure = {v for a, b in doubt for v in range(a, b + 1)}
    rows = [
        {
            "first": v,
            "last": v,
            "status": "issued",
            "reason": "",
            "idempotency_key": keys.get(v, ""),
            "at": "2026-12-02T02:00:00+00:00",
            "delivery": "unsure" if v in unsure else "",
        }
        for v in range(1, last + 1)
    ]
    rows += [
        {
            "first": a,
            "last": b,
            "status": "void",
            "reason": r,
            "idempotency_key": "",
            "delivery": "",
        }
        for a, b, r in void
    ]
    voided: dict[str, int] = {}
    for a, b, r in void:
        voided[r] = voided.get(r, 0) + b - a + 1
    abandoned = {v for a, b, r in void if r == "abandoned" for v in range(a, b + 1)}
    report = {
        "first": 1 if last else None,
        "last": last if last else None,
        "issued": last,
        "delivered": last - len(abandoned) - len(unsure - abandoned),
        "voided": voided,
        "voids": [{"first": a, "last": b, "reason": r} for a, b, r in void],
        "unsure": len(unsure),
        "unsure_runs": [{"first": a, "last": b} for a, b in doubt],
        "unexplained_gaps": 0,
        "gaps": [],
        "issued_twice": [],
        "rising": True,
    }
    report.update(change)
    return Records(report, rows, OK)


def rules(history: list[Attempt], found: dict[str, Records], **kw: Any) -> set[str]:
    broken, _ = check(history, found, **kw)
    return {line[:3] for line in broken}


def sound() -> list[Attempt]:
    return [
        got("a", [1], 0.0, 0.1),
        got("a", [2, 3], 0.2, 0.3),
        got("b", [1], 0.0, 0.1, key="k"),
        got("b", [1], 0.2, 0.3, key="k"),  # a replay of k
        got("a", [4], 0.25, 0.4),
    ]


def test_a_sound_history_breaks_nothing() -> None:
    broken, tally = check(sound(), {"a": records(4), "b": records(1, keys={1: "k"})})
    assert broken == []
    assert (tally.requests, tally.delivered, tally.issued) == (5, 6, 5)
    assert tally.pairs > 0, "the order rule saw pairs to hold"


def test_a_value_delivered_to_two_requests_breaks_uniqueness() -> None:
    history = [got("a", [1], 0.0, 0.1), got("a", [1], 0.05, 0.15)]
    assert rules(history, {"a": records(1)}) == {"(a)"}


def test_two_keys_holding_one_value_break_uniqueness() -> None:
    history = [got("a", [1], 0.0, 0.1, key="k"), got("a", [1], 0.05, 0.15, key="j")]
    assert "(a)" in rules(history, {"a": records(1, keys={1: "k"})})


def test_a_replay_with_other_values_breaks_uniqueness() -> None:
    history = [got("a", [1], 0.0, 0.1, key="k"), got("a", [2], 0.0, 0.15, key="k")]
    assert "(a)" in rules(history, {"a": records(2, keys={1: "k", 2: "k"})})


def test_a_smaller_value_after_a_received_one_breaks_order() -> None:
    history = [got("a", [2], 0.0, 0.1), got("a", [1], 0.2, 0.3)]
    assert rules(history, {"a": records(2)}) == {"(b)"}


def test_overlapping_requests_may_get_values_in_any_order() -> None:
    history = [got("a", [2], 0.0, 0.3), got("a", [1], 0.1, 0.2)]
    assert rules(history, {"a": records(2)}) == set()


def test_a_keyed_retry_is_one_operation_from_its_first_try() -> None:
    """The key's first try (cut) took 1 before `b` was sent; its retry, sent after b's reply,
    gets 1 back: not an order violation, one operation overlapping b."""
    history = [
        cut("a", 120, 0.0, key="k"),
        got("a", [2], 0.05, 0.1),
        got("a", [1], 0.2, 0.25, key="k"),
    ]
    assert rules(history, {"a": records(2, keys={1: "k"})}) == set()


def test_a_delivered_value_that_is_void_breaks_c() -> None:
    history = [got("a", [1], 0.0, 0.1, key="k"), got("a", [2], 0.2, 0.3)]
    found = records(2, keys={1: "k"}, void=((1, 1, "abandoned"),))
    assert rules(history, {"a": found}) == {"(c)"}


def test_a_value_nobody_received_neither_void_nor_unsure_breaks_d() -> None:
    history = [got("a", [1], 0.0, 0.1), cut("a", 160, 0.2)]
    assert rules(history, {"a": records(2)}) == {"(d)"}
    assert rules(history, {"a": records(2, void=((2, 2, "abandoned"),))}) == set()
    assert rules(history, {"a": records(2, doubt=((2, 2),))}, unsure_slack=1) == set()


def test_a_cut_within_watch_after_s_is_excepted_and_no_more_than_its_count() -> None:
    history = [got("a", [1], 0.0, 0.1), cut("a", 20, 0.2)]
    assert rules(history, {"a": records(2)}) == set()
    assert rules(history, {"a": records(3)}) == {"(d)"}, "one cut excuses one value"


def test_a_cut_as_the_service_answered_is_excepted_and_no_other() -> None:
    """A request cut (at 0.36 s) 4 ms before another client read its answer (0.364 s) crossed
    the service's answering: its answer may have gone out as its client left (RACE_S). One cut
    40 ms before it did not."""
    answered = got("a", [1], 0.2, 0.364)
    crossing = [answered, cut("a", 160, 0.2)]
    assert rules(crossing, {"a": records(2)}) == set()
    assert rules(crossing, {"a": records(3)}) == {"(d)"}, "one cut excuses one value"
    apart = [answered, cut("a", 120, 0.2)]
    assert rules(apart, {"a": records(2)}) == {"(d)"}
    # a keyed try's cut crossed it only once the key's values were issued (wall clock)
    issued = datetime.fromisoformat(records(1).export[0]["at"]).timestamp()
    first, crossed = cut("a", 120, 0.2, key="k"), cut("a", 158, 0.206, key="k")
    crossed.wall = issued + 0.1
    keyed = [answered, first, crossed]
    assert rules(keyed, {"a": records(2, keys={2: "k"})}) == set(), "a key's try crossed it"
    assert rules(keyed[:2], {"a": records(2, keys={2: "k"})}) == {"(d)"}
    crossed.wall = issued - 1.0  # cut before its values were issued: not their answer
    assert rules(keyed, {"a": records(2, keys={2: "k"})}) == {"(d)"}
    _, tally = check(crossing, {"a": records(2)})
    assert tally.raced == 1


def test_one_lone_keyed_race_per_counter_is_let_pass_and_two_are_not() -> None:
    """A keyed request whose values nobody received, no other answer beside any cut of it, but
    its last try cut after they were issued: its answer may have crossed that cut unseen
    (UNSEEN_RACES, one per counter). Two such keys break (d); none is let pass with races
    off, and none whose tries were all cut before its values were issued."""
    issued = datetime.fromisoformat(records(1).export[0]["at"]).timestamp()

    def lone(key: str, wall: float) -> Attempt:
        a = cut("a", 150, 0.0, key=key)
        a.wall = wall
        return a

    one = [lone("k", issued + 0.1)]
    assert rules(one, {"a": records(1, keys={1: "k"})}) == set()
    assert rules(one, {"a": records(1, keys={1: "k"})}, races=False) == {"(d)"}
    two = [lone("k", issued + 0.1), lone("m", issued + 0.2)]
    assert rules(two, {"a": records(2, keys={1: "k", 2: "m"})}) == {"(d)"}
    early = [lone("k", issued - 1.0)]
    assert rules(early, {"a": records(1, keys={1: "k"})}) == {"(d)"}


def test_every_cut_is_excepted_on_the_lambda_edge() -> None:
    history = [got("a", [1], 0.0, 0.1), cut("a", 160, 0.2)]
    assert rules(history, {"a": records(2)}, cuts_cancel=False) == set()


def test_a_keyed_value_lost_is_named_by_its_key() -> None:
    history = [
        cut("a", 200, 0.0, key="k"),
        Attempt("a", 1, "k", 0.3, 0.4, 504, (), None, "application/problem+json"),
    ]
    broken, _ = check(history, {"a": records(1, keys={1: "k"})})
    assert len(broken) == 1 and broken[0].startswith("(d)") and "key k" in broken[0]


def test_an_unexplained_gap_or_a_count_that_disagrees_breaks_e() -> None:
    history = [got("a", [1], 0.0, 0.1)]
    assert rules(history, {"a": records(1, unexplained_gaps=1)}) == {"(e)"}
    assert rules(history, {"a": records(1, delivered=0)}) == {"(e)"}
    assert rules(history, {"a": records(1, unsure=1)}) == {"(e)"}
    assert rules(history, {"a": records(1, voided={"abandoned": 1})}) == {"(e)"}
    assert rules(history, {"a": records(1, rising=False)}) == {"(e)"}


def test_a_received_value_the_report_does_not_issue_breaks_e() -> None:
    history = [got("a", [1], 0.0, 0.1), got("a", [2], 0.2, 0.3)]
    assert "(e)" in rules(history, {"a": records(1)})


def test_unsure_must_be_tight() -> None:
    history = [got("a", [1], 0.0, 0.1), got("a", [2], 0.2, 0.3)]
    found = {"a": records(2, doubt=((1, 2),))}
    assert rules(history, found) == {"(e)"}
    assert rules(history, found, unsure_slack=2) == set()


def test_an_unsound_trail_breaks_f() -> None:
    found = records(1)
    found.verify = {"ok": False, "first_bad": {"row": 3}}
    assert rules([got("a", [1], 0.0, 0.1)], {"a": found}) == {"(f)"}


@pytest.mark.parametrize(
    "wrong",
    [
        Attempt("a", 1, None, 0.0, 0.1, 200, (1,), "b", "application/json"),
        Attempt("a", 2, None, 0.0, 0.1, 200, (1,), "a", "application/json"),
        Attempt("a", 2, None, 0.0, 0.1, 200, (1, 3), "a", "application/json"),
    ],
    ids=["other counter", "fewer values", "not consecutive"],
)
def test_an_answer_of_another_counter_or_count_breaks_g(wrong: Attempt) -> None:
    assert "(g)" in rules([wrong], {"a": records(3)})


def test_a_4xx_or_a_500_breaks_h() -> None:
    for status, kind in (
        (400, "application/problem+json"),
        (500, "application/problem+json"),
        (503, "text/plain"),
    ):
        history = [Attempt("a", 1, None, 0.0, 0.1, status, (), None, kind)]
        assert rules(history, {"a": records(0)}) == {"(h)"}


def test_a_single_and_a_batch_answer_are_read() -> None:
    one = Attempt("a", 1, None, 0.0, 0.0)
    parse(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n"
        b'{"counter":"a","value":7,"formatted":"7"}',
        one,
    )
    assert (one.status, one.values, one.got_counter) == (200, (7,), "a")
    many = Attempt("a", 2, None, 0.0, 0.0)
    parts = [b'{"counter":"a","first":3,"last":4,"values":', b'[{"value":3},{"value":4}]}']
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + body, many)
    assert many.values == (3, 4)


def test_a_request_never_answered_breaks_h() -> None:
    never = Attempt("a", 1, None, 0.0, 30.0, error="TimeoutError: no answer within 30 s")
    assert rules([never], {"a": records(0)}) == {"(h)"}


def test_a_death_that_cannot_be_listed_is_excepted_only_when_said() -> None:
    died = Attempt("a", 1, None, 0.2, 0.3, error="closed without an answer")
    history = [got("a", [1], 0.0, 0.1), died]
    assert rules(history, {"a": records(2)}) == {"(d)"}
    assert rules(history, {"a": records(2)}, deaths_listed=False) == set()
