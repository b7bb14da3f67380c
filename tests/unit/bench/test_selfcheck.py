from __future__ import annotations

from bench.load import Second
from bench.selfcheck import held_in


def test_a_second_is_held_with_a_few_late_sends_but_not_with_many() -> None:
    assert held_in(Second(offered=10_000, sent=10_000, ok=9_990, missed=40))  # one short stall
    assert not held_in(Second(offered=10_000, sent=10_000, ok=9_990, missed=150))


def test_a_second_with_unanswered_sends_is_not_held() -> None:
    assert not held_in(Second(offered=10_000, sent=10_000, ok=9_800, missed=0))
