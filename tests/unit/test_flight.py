"""Flight: since when all of an edge's requests were answered."""

from __future__ import annotations

from functions.flight import MARGIN_S, Flight


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_with_nothing_held_the_mark_is_now_less_the_margin() -> None:
    clock = Clock()
    flight = Flight(clock)
    flight.end(flight.begin())
    clock.now = 1005.0
    assert flight.mark() == 1005.0 - MARGIN_S


def test_a_request_held_across_marks_keeps_the_mark_at_its_epoch_until_it_ends() -> None:
    clock = Clock()
    flight = Flight(clock)
    clock.now = 1001.0
    flight.mark()  # epoch 1 begins at 1001
    clock.now = 1001.5
    slow = flight.begin()
    quick = flight.begin()
    flight.end(quick)
    for now in (1002.0, 1003.0, 1010.0):
        clock.now = now
        assert flight.mark() == 1001.0, "the epoch the held request began in"
    flight.end(slow)
    clock.now = 1011.0
    assert flight.mark() == 1011.0 - MARGIN_S
    assert len(flight.holding) == 1, "answered epochs are let go"


def test_the_mark_never_passes_a_request_that_began_before_it() -> None:
    clock = Clock()
    flight = Flight(clock)
    held: list[tuple[float, int]] = []
    for step in range(40):
        clock.now = 1000.0 + step * 0.3
        if step % 3 == 0:
            held.append((clock.now, flight.begin()))
        if step % 5 == 0 and held:
            flight.end(held.pop(0)[1])
        if step % 4 == 0:
            mark = flight.mark()
            assert all(mark <= began for began, _ in held)


def test_a_request_that_ends_after_a_mark_moves_the_next_one() -> None:
    """The edge says its mark at a beat only when it may have moved: a request answered after a
    mark, with none begun since, moves it (said at the next beat, not ALIVE_EVERY_S later: the
    matrix's kill cell found the edge's `unsure` twice as wide as SETTLE_EVERY_S allows, its
    clients' requests beginning in waves a reply's wait apart)."""
    clock = Clock()
    flight = Flight(clock)
    held = flight.begin()
    assert flight.moved
    clock.now = 1001.0
    assert flight.mark() == 1000.0
    assert not flight.moved, "nothing began or ended since"
    flight.end(held)
    assert flight.moved
    clock.now = 1001.1
    assert flight.mark() == 1001.1 - MARGIN_S
