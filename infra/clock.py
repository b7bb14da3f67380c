"""The wall clock numerator reads periods from; tests pass their own callable instead."""

from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)
