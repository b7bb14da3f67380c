"""The concurrency checks can fail: they catch what they claim to."""

from __future__ import annotations

import pytest

from tests.checks import Answer, assert_guarantees, assert_ordered


def test_duplicates_and_holes_are_caught() -> None:
    with pytest.raises(AssertionError, match="twice"):
        assert_guarantees([Answer("c", 1, 2, 0, 1), Answer("c", 2, 3, 0, 1)])
    with pytest.raises(AssertionError, match="holes"):
        assert_guarantees([Answer("c", 1, 1, 0, 1), Answer("c", 3, 3, 0, 1)])


def test_order_violation_is_caught() -> None:
    # the first reply was read at t=1, the second request sent at t=2 got a smaller value
    with pytest.raises(AssertionError, match="order"):
        assert_ordered([Answer("c", 5, 5, 0, 1), Answer("c", 4, 4, 2, 3)])
    assert_ordered([Answer("c", 4, 4, 0, 1), Answer("c", 5, 5, 2, 3)])


def test_order_check_refuses_to_pass_vacuously() -> None:
    with pytest.raises(AssertionError, match="saw nothing"):
        assert_ordered([Answer("c", 1, 1, 0, 5), Answer("c", 2, 2, 1, 6)])


def test_every_recorded_run_is_checked_for_order() -> None:
    """assert_guarantees checks real-time order too: a unique, hole-free run whose later
    request got the smaller value fails."""
    with pytest.raises(AssertionError, match="order"):
        assert_guarantees([Answer("c", 2, 2, 0, 1), Answer("c", 1, 1, 2, 3)])
    assert_guarantees([Answer("c", 1, 1, 0, 5), Answer("c", 2, 2, 1, 6)])  # a burst: no pairs
