"""A frame: the records one batcher collected in one time window, applied in one transaction."""

from __future__ import annotations

from collections.abc import Collection
from enum import Enum

from infra.ports import Entry
from infra.settings import Policy
from infra.wire import Cancel, Demand, Record, Reply


class State(Enum):
    OPEN = "open"
    """Collecting records; nothing has touched Postgres."""
    APPLIED = "applied"
    """Its transaction committed: values allocated, checkpoint advanced. Replies not yet out."""
    PUBLISHED = "published"
    """Every record has its reply in the Replies port. The frame is done."""


class IllegalStep(RuntimeError):
    pass


def collect_for(
    policy: Policy,
    longest: float,
    waited: float,
    since_commit: float,
    gap: float,
    spacing: float = 0.0,
    since_start: float = float("inf"),
) -> float:
    """Seconds a frame whose oldest record was put `waited` seconds ago keeps collecting.
    `since_commit`: seconds since the previous transaction ended; `since_start`: since it began.
    `spacing` (1 / MAX_FRAMES_PER_S) holds transactions apart whatever the policy: with a cap,
    frames grow instead of transactions multiplying."""
    left = max(0.0, longest - waited)  # clamped: writers' clocks may differ from ours
    wait = min(longest, left) if policy is Policy.FIXED else min(max(0.0, gap - since_commit), left)
    return max(wait, spacing - since_start, 0.0)


class Frame:
    def __init__(self, entries: list[Entry] | None = None) -> None:
        self.entries: list[Entry] = entries or []
        self.state = State.OPEN
        self.replies: list[Reply] = []
        self.read_to: str | None = self.entries[-1].sequence if self.entries else None
        """The last sequence the frame took from its shard, its dropped records' included: where
        the shard is read on from."""

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entries: list[Entry]) -> None:
        self._require(State.OPEN, "add records to")
        self.entries.extend(entries)
        if entries:
            self.read_to = entries[-1].sequence

    def drop(self, cutoff: float) -> list[Demand]:
        """Take out the records whose deadline falls before `cutoff`; return them."""
        self._require(State.OPEN, "drop records from")
        kept: list[Entry] = []
        dropped: list[Demand] = []
        for entry in self.entries:
            record = entry.record
            if record is not None and record.deadline and record.deadline < cutoff:
                dropped.append(record)
            else:
                kept.append(entry)
        self.entries = kept
        return dropped

    def forget_cancels(self, keys: set[str]) -> None:
        """Take out the cancels of the records `keys` (each key then leaves `keys`): a batcher's
        own cancels of records it gave up and never applied, read back into the frame they left;
        they are there for a batcher that takes the shard over (batcher/applier.py)."""
        self._require(State.OPEN, "drop records from")
        kept: list[Entry] = []
        for entry in self.entries:
            record = entry.record
            if isinstance(record, Cancel) and record.key in keys:
                keys.discard(record.key)
            else:
                kept.append(entry)
        self.entries = kept

    def forget(self, keys: Collection[str]) -> None:
        """Take out the records whose reply keys are in `keys`: records this batcher gave up
        (a cancel put behind them, their clients answered 'unavailable'), read again by its
        loop that took their shard over; allocated, their values would go to no one, or to a
        client whose reply came first and then be voided by the cancel."""
        self._require(State.OPEN, "drop records from")
        self.entries = [
            entry
            for entry in self.entries
            if not (isinstance(entry.record, Record) and entry.record.key in keys)
        ]

    def take_through(self, sequence: str) -> list[Entry]:
        """Take out the entries up to `sequence`, inclusive (a try that committed them, taken
        in before more were); return them."""
        self._require(State.OPEN, "take records from")
        through = [e for e in self.entries if int(e.sequence) <= int(sequence)]
        self.entries = self.entries[len(through) :]
        return through

    def applied(self, replies: list[Reply]) -> None:
        self._require(State.OPEN, "apply")
        self.replies = replies
        self.state = State.APPLIED

    def published(self) -> None:
        self._require(State.APPLIED, "publish")
        self.state = State.PUBLISHED

    def opened(self, default: float) -> float:
        """When the oldest record was put (Unix seconds), or `default` if none says."""
        sent = [e.record.sent for e in self.entries if e.record is not None and e.record.sent]
        return min(sent) if sent else default

    @property
    def first_sequence(self) -> str:
        return self.entries[0].sequence

    @property
    def last_sequence(self) -> str:
        return self.entries[-1].sequence

    def _require(self, state: State, action: str) -> None:
        if self.state is not state:
            raise IllegalStep(f"cannot {action} a frame that is {self.state.value}")
