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

Phased beats (READ_BEATS=phased): each shard has a phase of its own, the start of its hash key
range as a share of the key space times the interval, so the shards of an evenly split stream are
read one after another, spread over the interval rather than all at once. A Lambda edge puts its
record (a server edge its front frame) on the shard read next after its put returns
(`Phases.choose`, ExplicitHashKey), so it waits a fraction of the interval for the read, not half
of it; every edge reads a reply at the beats of the shard its record landed on (PutRecord and
PutRecords answer with the ShardId). Both
sides work the phase out from the shard's own key range: no list to agree on, and a reshard's new
shards have theirs.

The functions are arithmetic on times of one clock, in seconds; `Wall` reads the clocks.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Collection, Iterable

from infra.settings import Settings

SLACK_S = 0.015
"""How late after its beat a shard's read may begin and still be that beat's read (at most a
quarter of the interval). Larger carries more lateness (the edges' lag must cover it); smaller
skips a beat more often (records wait an interval more, and their edges read once in vain)."""

_ROUNDING = 1e-6  # of an interval: a time this close to a beat is that beat, not the next
KEYS = 2**128  # Kinesis's hash key space: a shard owns a range of it


def beat(t: float, interval: float, phase: float = 0.0) -> float:
    """The first beat at or after `t` (of the beats `phase` after the multiples of `interval`)."""
    return math.ceil((t - phase) / interval - _ROUNDING) * interval + phase


def phase_of(start: int, interval: float) -> float:
    """The phase of a shard whose hash key range starts at `start`, with phased beats."""
    return interval * start / KEYS


def next_read(
    now: float, earliest: float, interval: float, behind: bool = False, phase: float = 0.0
) -> float:
    """When a shard is read next: `earliest` is when the interval since its last read began
    ends. On the first beat from then (less the slack); at once if that has passed; as soon as
    `earliest` allows when the batcher is `behind` the shard (or there are no beats: an interval
    of 0). Never before `earliest`."""
    if behind or interval <= 0:
        return max(now, earliest)
    slack = min(SLACK_S, interval / 4)
    return max(now, earliest, beat(earliest - slack, interval, phase))


def reply_lag(settings: Settings) -> float:
    """Seconds from a beat to when an edge first reads the replies of the records read on it:
    the back frame, and REPLY_LAG_MS for the rest (the read's lateness, SLACK_S at most; a
    GetRecords, the commit and a BatchWriteItem). Shorter, and a reply is read in vain before
    it is written and then a beat later; longer, and every request waits for nothing."""
    return (settings.frames.back_frame_ms + settings.aws.reply_lag_ms) / 1000


def first_read(put: float, interval: float, lag: float, phase: float = 0.0) -> float:
    """When an edge first reads the reply to a record whose put returned at `put` (to a shard
    of `phase`): `lag` after the first beat from then, the read that takes the record in."""
    return beat(put, interval, phase) + lag


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


class Times:
    """How long something takes here: a mean and a mean deviation, moving an eighth and a quarter
    of the way to each new time, as TCP estimates a round trip (RFC 6298); `mean` and `deviation`
    are the first guess."""

    def __init__(self, mean: float, deviation: float) -> None:
        self.mean, self.deviation = mean, deviation

    def add(self, seconds: float) -> None:
        self.deviation += (abs(seconds - self.mean) - self.deviation) / 4
        self.mean += (seconds - self.mean) / 8

    def likely(self) -> float:
        """A time with room for most: the mean and twice the mean deviation."""
        return self.mean + 2 * self.deviation


class Phases:
    """The open shards of a stream by phase: which to put a record on so that it is read soon
    after its put returns (phased beats)."""

    def __init__(self, interval: float, shards: Iterable[tuple[str, int]] = ()) -> None:
        """`shards`: (ShardId, the start of its hash key range) of each open shard."""
        self.interval = interval
        ranked = sorted((phase_of(start, interval), str(start), shard) for shard, start in shards)
        self._phases = [phase for phase, _, _ in ranked]
        self._keys = [key for _, key, _ in ranked]
        self.of = {shard: phase for phase, _, shard in ranked}

    def __len__(self) -> int:
        return len(self._phases)

    def choose(self, returns: float, avoid: Collection[str] = ()) -> tuple[str, float]:
        """For a put that returns at `returns` (Unix time): the hash key to put it under (the
        start of the shard read first from then, not one of `avoid`'s unless all are) and that
        shard's phase."""
        if not self._phases:
            raise ValueError("no open shards")
        into = returns % self.interval
        at = bisect.bisect_left(self._phases, into - self.interval * _ROUNDING)
        at = at if at < len(self._phases) else 0  # none later in this interval: the next's first
        if avoid:
            count = len(self._keys)
            at = next(
                (i % count for i in range(at, at + count) if self._keys[i % count] not in avoid), at
            )
        return self._keys[at], self._phases[at]
