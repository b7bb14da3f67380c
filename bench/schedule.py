"""Load schedules in the usual load-tool notation, concatenated:

    const(RPS, DURATION)            RPS requests per second for DURATION
    line(FROM, TO, DURATION)        the rate moves linearly from FROM to TO over DURATION
    step(FROM, TO, STEP, DURATION)  FROM, FROM+STEP, … up to TO, each held for DURATION

e.g. `line(100, 2000, 30s) const(2000, 1m)`. Durations take ms, s, m or h (plain numbers are
seconds). A schedule yields the send time of every request, in seconds from the start.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}
TERM = re.compile(r"\s*(const|line|step)\s*\(([^)]*)\)\s*[,;]?")
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|)\s*$")


class ScheduleError(ValueError):
    pass


def duration(text: str) -> float:
    match = DURATION.fullmatch(text)
    if not match:
        raise ScheduleError(f"bad duration {text.strip()!r}: use e.g. 500ms, 10s, 2m, 1h")
    value = float(match.group(1)) * UNITS[match.group(2)]
    if value <= 0:
        raise ScheduleError(f"duration {text.strip()!r} must be positive")
    return value


def rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ScheduleError(f"bad rate {text.strip()!r}: a number of requests per second") from None
    if value < 0 or not math.isfinite(value):
        raise ScheduleError(f"rate {text.strip()!r} must be a non-negative number")
    return value


@dataclass(frozen=True)
class Segment:
    """A stretch of time over which the rate moves linearly from `start` to `end` (rps)."""

    start: float
    end: float
    seconds: float

    def rate_at(self, t: float) -> float:
        return self.start + (self.end - self.start) * t / self.seconds

    def count(self) -> float:
        return (self.start + self.end) / 2 * self.seconds

    def time_of(self, k: float) -> float:
        """When the k-th request of this segment (counted from 0 at its start) is due: the t
        where the integral of the rate from 0 to t equals k."""
        a, slope = self.start, (self.end - self.start) / self.seconds
        if abs(slope) < 1e-12:
            return k / a
        # a t + slope t² / 2 = k  →  t = (-a + sqrt(a² + 2 slope k)) / slope
        root = math.sqrt(max(0.0, a * a + 2 * slope * k))
        return (root - a) / slope if slope > 0 else 2 * k / (a + root)


@dataclass(frozen=True)
class Schedule:
    text: str
    segments: tuple[Segment, ...]

    @classmethod
    def parse(cls, text: str) -> Schedule:
        segments: list[Segment] = []
        position = 0
        text = text.strip()
        if not text:
            raise ScheduleError("empty schedule: use e.g. const(200, 10s)")
        while position < len(text):
            match = TERM.match(text, position)
            if not match:
                raise ScheduleError(
                    f"cannot read {text[position:]!r}: expected const(), line() or step()"
                )
            kind, args = match.group(1), [a for a in match.group(2).split(",")]
            segments.extend(_segments(kind, args))
            position = match.end()
        return cls(text, tuple(segments))

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.segments)

    @property
    def requests(self) -> int:
        return sum(1 for _ in self.times())

    def rate_at(self, t: float) -> float:
        for segment in self.segments:
            if t < segment.seconds:
                return segment.rate_at(t)
            t -= segment.seconds
        return 0.0

    def times(self) -> Iterator[float]:
        """The send time of every request, in order: request n (from 0) is due when the integral
        of the rate since the start reaches n."""
        offset, done, n = 0.0, 0.0, 0
        for segment in self.segments:
            total = segment.count()
            while n < done + total - 1e-9:
                yield offset + segment.time_of(n - done)
                n += 1
            offset += segment.seconds
            done += total


def _segments(kind: str, args: list[str]) -> list[Segment]:
    expected = {"const": 2, "line": 3, "step": 4}[kind]
    if len(args) != expected:
        names = {
            "const": "RPS, DURATION",
            "line": "FROM, TO, DURATION",
            "step": "FROM, TO, STEP, DURATION",
        }[kind]
        raise ScheduleError(f"{kind}() takes {expected} arguments: {kind}({names})")
    if kind == "const":
        r = rate(args[0])
        return [Segment(r, r, duration(args[1]))]
    if kind == "line":
        return [Segment(rate(args[0]), rate(args[1]), duration(args[2]))]
    low, high, step, hold = rate(args[0]), rate(args[1]), rate(args[2]), duration(args[3])
    if step <= 0:
        raise ScheduleError("step() needs a positive STEP")
    direction = 1 if high >= low else -1
    segments, current = [], low
    while (current <= high + 1e-9) if direction > 0 else (current >= high - 1e-9):
        segments.append(Segment(current, current, hold))
        current += direction * step
    return segments
