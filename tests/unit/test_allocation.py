"""Range allocation: splitting one period's delta among the records of a frame."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from batcher.allocation import split

counts = st.lists(st.integers(min_value=1, max_value=1000), min_size=1, max_size=200)


@given(st.integers(min_value=0, max_value=2**40), st.integers(min_value=0, max_value=10**6), counts)
def test_split_covers_the_new_values_exactly_once_in_order(
    start: int, earlier: int, wanted: list[int]
) -> None:
    total = earlier + sum(wanted)  # what Postgres returns after adding this frame's delta
    ranges = split(start, total, wanted)
    assert [last - first + 1 for first, last in ranges] == wanted
    assert ranges[0][0] == start + earlier  # right after what earlier frames handed out
    assert ranges[-1][1] == start + total - 1
    for (_, last), (first, _) in pairwise(ranges):
        assert first == last + 1  # contiguous, no overlap, increasing


@given(st.integers(min_value=0, max_value=1000), st.lists(counts, min_size=1, max_size=20))
def test_successive_frames_never_overlap(start: int, frames: list[list[int]]) -> None:
    total = 0
    handed: list[int] = []
    for wanted in frames:
        total += sum(wanted)
        for first, last in split(start, total, wanted):
            handed.extend(range(first, last + 1))
    assert handed == list(range(start, start + total))
