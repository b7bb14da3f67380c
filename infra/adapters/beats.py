"""Read beats: when a batcher reads a shard, and so when an edge reads the reply, on one clock.

A batcher reads each shard on the beats of READ_INTERVAL_MS: the Unix times that are whole
multiples of it. An edge knows the interval but not its batcher, so it can tell when its record
is read, at the first beat after its put returned, and read the reply once, a lag after that
beat (BACK_FRAME_MS + REPLY_LAG_MS: a read, a frame, a commit and a reply write); a read that
finds nothing is tried again one beat later, at the same lag. Before beats a shard was read
every interval at a phase no edge knew, and a Lambda container read its reply about 1.5 times a
request.

What keeps a beat a promise rather than a hope:

- AWS allows five reads a second per shard: a shard's reads begin at least the interval apart by
  the monotonic clock, whatever the beats say. An event loop wakes a little late, and a read's
  lateness carries over to the next (the next may not begin sooner than the interval after it),
  so lateness of up to SLACK_S is carried and beyond that the shard skips a beat to get back on.
- A batcher behind its shard (MillisBehindLatest > 0), or past a beat it was meant to read at,
  reads as soon as the interval allows, as before beats: catching up comes first.
- Clocks differ between hosts (AWS's keep within a millisecond of Amazon Time Sync): an edge
  whose clock is off reads at the wrong phase, still once a beat, and finds its reply a beat
  late at worst. A wrong clock costs reads and time, never a reply.

The functions are arithmetic on times of one clock, in seconds; `Wall` reads the clocks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from infra.settings import Settings

SLACK_S = 0.015
"""How late after its beat a shard's read may begin and still be that beat's read (at most a
quarter of the interval). Larger carries more lateness (the edges' lag must cover it); smaller
skips a beat more often (records wait an interval more, and their edges read once in vain)."""

_ROUNDING = 1e-6  # of an interval: a time this close to a beat is that beat, not the next


def beat(t: float, interval: float) -> float:
    """The first beat at or after `t`."""
    return math.ceil(t / interval - _ROUNDING) * interval


def next_read(now: float, earliest: float, interval: float, behind: bool = False) -> float:
    """When a shard is read next: `earliest` is when the interval since its last read began
    ends. On the first beat from then (less the slack); at once if that has passed; as soon as
    `earliest` allows when the batcher is `behind` the shard (or there are no beats: an interval
    of 0). Never before `earliest`."""
    if behind or interval <= 0:
        return max(now, earliest)
    slack = min(SLACK_S, interval / 4)
    return max(now, earliest, beat(earliest - slack, interval))


def reply_lag(settings: Settings) -> float:
    """Seconds from a beat to when an edge first reads the replies of the records read on it:
    the back frame, and REPLY_LAG_MS for the rest (the read's lateness, SLACK_S at most; a
    GetRecords, the commit and a BatchWriteItem). Shorter, and a reply is read in vain before
    it is written and then a beat later; longer, and every request waits for nothing."""
    return (settings.frames.back_frame_ms + settings.aws.reply_lag_ms) / 1000


def first_read(put: float, interval: float, lag: float) -> float:
    """When an edge first reads the reply to a record whose put returned at `put`: `lag` after
    the first beat from then, the read that takes the record in."""
    return beat(put, interval) + lag


def read_again(due: float, now: float, interval: float) -> float:
    """When a reply read at `now` (due at `due`) and not found is read next: as far after the
    next beat still ahead as `due` was after its own."""
    return due + interval * max(1, math.floor((now - due) / interval) + 1)


class Wall:
    """The wall clock, as an offset from the monotonic one that is read afresh every `refresh`
    seconds. Times worked out from one offset agree to the bit, so the keys expected at one beat
    fall due at one instant and share a read; reading both clocks for each key would now and
    then put a thread switch between the two readings, and split them."""

    def __init__(
        self,
        refresh: float = 10.0,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.refresh, self._wall, self._monotonic = refresh, wall, monotonic
        self._offset, self._read = 0.0, -math.inf

    def offset(self) -> float:
        """Unix time less monotonic time."""
        now = self._monotonic()
        if now - self._read >= self.refresh:
            self._offset, self._read = self._wall() - self._monotonic(), now
        return self._offset
