"""`outside`: the parts of spans no hole covers (a lost commit's values less its keys' claims)."""

from __future__ import annotations

from infra.spans import Span, outside


def test_holes_cut_a_span_into_what_they_leave() -> None:
    whole = Span("inv", "2026", 10, 20)
    holes = [Span("inv", "2026", 18, 18), Span("inv", "2026", 10, 11), Span("inv", "2026", 14, 15)]
    assert outside([whole], holes) == [
        Span("inv", "2026", 12, 13),
        Span("inv", "2026", 16, 17),
        Span("inv", "2026", 19, 20),
    ]


def test_only_holes_of_the_same_counter_and_period_cut() -> None:
    spans = [Span("inv", "2026", 1, 3), Span("inv", "2027", 1, 3), Span("po", "", 5, 5)]
    holes = [Span("inv", "2027", 1, 3), Span("po", "2026", 5, 5), Span("inv", "2026", 4, 9)]
    assert outside(spans, holes) == [Span("inv", "2026", 1, 3), Span("po", "", 5, 5)]


def test_a_span_covered_whole_leaves_nothing() -> None:
    assert outside([Span("inv", "", 7, 9)], [Span("inv", "", 7, 8), Span("inv", "", 9, 9)]) == []
    assert outside([Span("inv", "", 7, 9)], []) == [Span("inv", "", 7, 9)]
