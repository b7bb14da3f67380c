"""The ports: one Protocol per external system. Adapters live beside them, one module each."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, NamedTuple, Protocol

from infra.counters import Counter
from infra.keys import Key
from infra.ledger import EdgeEnd, Link, VoidRow
from infra.spans import Span
from infra.trail import Anchor, Breach, Start
from infra.wire import BadRecord, Demand, Reply, ReplyError, decode_record


@dataclass(slots=True)
class Entry:
    """A record as read from a shard, at its sequence number. `record` is None for a poison
    record, whose raw bytes and problem go to the dead-letter table."""

    shard: str
    sequence: str
    record: Demand | None
    raw: bytes = b""
    problem: str = ""
    key: str | None = None
    arrived: float = 0.0  # when the stream took it (Unix time: Kinesis's arrival stamp), or 0

    @classmethod
    def decode(cls, shard: str, sequence: str, raw: bytes) -> Entry:
        """The entry for raw bytes read off a durable stream: a poison one if they do not
        decode, keeping the reply key when it could be read, so the client hears why."""
        try:
            record = decode_record(raw)
        except BadRecord as exc:
            return cls(shard, sequence, None, raw, str(exc), exc.key)
        return cls(shard, sequence, record, raw, key=record.key)


@dataclass(slots=True)
class Reads:
    """A stream's reads in flight (Kinesis's GetRecords calls), as the stream counts them, and
    what it calls soon after each ends: what a batcher's gather waits for (batcher/gather.py)."""

    reading: int = 0
    read_ended: Callable[[], None] | None = None


class Stream(Protocol):
    """An ordered, sharded log of records (in memory, or Kinesis).

    `name` names the stream in the lease table. `durable` says whether the records survive the
    process that put them, so that a batcher that restarts (or takes over a shard) replays them
    from the shard's checkpoint: True for Kinesis; False in memory, where a record lives only as
    long as the process that holds it.
    """

    name: str
    durable: bool

    @property
    def reads(self) -> Reads | None:
        """Its reads in flight, when it counts them (Kinesis); None when it does not."""

    async def put(self, records: Sequence[Demand], shard: str | None = None) -> None:
        """Append records, each to the shard its counter maps to, or all to `shard` (a
        batcher's cancels of records it read there: behind them, whatever shard their
        partition keys map to); raise StreamFull when the stream will not take them now
        (back-pressure, throttling), Unavailable when it cannot be reached. A record is put at
        most once."""

    async def shards(self) -> dict[str, tuple[str, ...]]:
        """The shards to read, each with its parents (after a reshard), parents first. A child
        is read only once its parents have ended."""

    async def read(self, shard: str, after: str | None, limit: int, wait: float) -> list[Entry]:
        """Up to `limit` entries that follow sequence `after` (from the shard's start when None),
        in order, waiting up to `wait` seconds for one. Entries at or before `after` are never
        returned again. Raise ShardEnded once a closed shard has nothing after `after`."""

    def lag(self, shard: str) -> float | None:
        """Seconds the last read of `shard` was behind the shard's newest record, when the
        stream tells (Kinesis's MillisBehindLatest); None when it does not."""


class Replies(Protocol):
    """Where the batcher leaves answers and the edge awaits them (in memory, or DynamoDB)."""

    def expect(self, key: str) -> None:
        """Called before the record is put, so that a fast reply is never missed."""

    def forget(self, key: str) -> None:
        """An expected key whose record could not be put: stop awaiting it."""

    async def publish(self, replies: Sequence[Reply]) -> None: ...

    async def wait(self, key: str, timeout: float) -> Reply:
        """The reply under `key`; raise ReplyTimeout when none comes within `timeout` seconds."""


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to apply one shard's records: `epoch` fences out every earlier owner."""

    stream: str
    shard: str
    owner: str
    epoch: int
    sequence: str | None
    applied: int | None = None
    """The highest sequence ever applied on the shard (durable streams): records at or below it
    are replays, answered from the replies kept for them, never allocated again."""


@dataclass(frozen=True, slots=True)
class Claim:
    """An idempotency key and the range it was answered with; `holder`: the reply key of the
    record that took it (or, freed, of a record whose cancel freed it)."""

    counter: str
    key: str
    count: int
    first: int
    last: int
    day: date
    holder: str = ""


@dataclass(slots=True)
class Audit:
    """A frame's audit row for the counters of one retention class (Counter.keeping), hashed
    into its chain as written (docs/invoices.md, "What an audit row holds"):

    - `ranges`: [counter, period, first, last] for each range the frame allocated;
    - `detail["r"]`: [counter, period, runs] for each counter and period, who took its range,
      run by run in the order it is split: each a Run [size, who, Idempotency-Key or
      null, edge] (edge: the reply-key prefix of the edge that asked; rows written before runs had
      an edge or a key hold [count, who] or [count, who, key]);
    - `detail["v"]`: [counter, period, first, last, reason, who] for each void made;
    - `detail["c"]`, only in a frame that confirmed values: [counter, period, first, last,
      who] for each confirmation."""

    klass: str
    keep_s: float
    detail: dict[str, list[list[Any]]]
    ranges: list[Span] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class VoidAsk:
    """A void to make in a frame's transaction, checked there against what was handed out."""

    counter: str
    period: str
    first: int
    last: int
    reason: str
    who: str
    start: int
    keep_s: float


@dataclass(frozen=True, slots=True)
class ConfirmAsk:
    """A confirmation to record in a frame's transaction, checked there as a void is."""

    counter: str
    period: str
    first: int
    last: int
    who: str
    start: int
    keep_s: float


class HeldReplies(NamedTuple):
    """A committed frame's replies as a durable stream's shard holds them until published:
    their `id` (to mark them published) and the encoded `replies`."""

    id: int
    replies: bytes


class Pruned(NamedTuple):
    """What pruning the audit trail did (`Frames.prune_chains`): how many rows are `gone`, and
    where each chain it pruned now starts."""

    gone: int
    starts: dict[str, Start]


class PlainDemand(NamedTuple):
    """A plain frame's demand on one (counter, period) (`Frames.allocate_plain`): its `delta`,
    the counter's `start` and retention class (`klass`: its audit row's), and its `floor` (as a
    count of values handed out: the audit trail's highest)."""

    counter: str
    period: str
    delta: int
    start: int
    klass: str
    floor: int


class Holder(NamedTuple):
    """A record holding an Idempotency-Key's values: the key's counter, the key, and the
    record's reply key (`FrameTransaction.hand_over`, `free`)."""

    counter: str
    key: str
    reply: str


class NotMade(NamedTuple):
    """Why a void or a confirmation was not made (`FrameTransaction.void`, `confirm`)."""

    error: ReplyError
    detail: str


Made = NotMade | bool
"""What became of a void or a confirmation asked: made (True), made before (False), or not."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    stream: str
    shard: str
    sequence: str
    problem: str
    raw: bytes


class FrameTransaction(Protocol):
    """One Postgres transaction applying one frame. Leaving the block commits it."""

    async def claims(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Claim]:
        """Earlier answers for (counter, idempotency key) pairs still within retention. The
        keys without one are reserved until the transaction ends: a concurrent frame asking for
        the same key waits, then finds this frame's answer (which `remember` must record)."""

    async def allocate(
        self, deltas: dict[tuple[str, str], int], floors: Mapping[tuple[str, str], int]
    ) -> dict[tuple[str, str], int]:
        """Add each delta to its (counter, period) row, locking rows in a fixed order; return how
        many values each period has handed out after the addition. A period whose row says
        fewer were handed out than `floors` (what the audit trail holds) is left alone and
        missing from the answer: its values would be handed out again."""

    async def remember(self, claims: Sequence[Claim], retention: float) -> None: ...

    async def hand_over(self, holders: Sequence[Holder]) -> None:
        """Each holder: the key's values were answered again, to
        that record (a retry), which holds them too, beside the records answered them before."""

    async def free(self, holders: Sequence[Holder]) -> list[Claim]:
        """Each holder: that record's request was cancelled, and
        no longer holds the key's values. A key none of whose records holds its values any
        more is forgotten; the claims forgotten, whose values are to be voided (`holder`: one
        of the cancelled records). A key answered to a request not cancelled is kept: its
        values may have been delivered."""

    async def dead_letter(self, letters: Sequence[DeadLetter]) -> None: ...

    async def void(self, asks: Sequence[VoidAsk]) -> list[Made]:
        """Make each void, in order: True when made, False when the same void was made before
        (the same values, the same reason: idempotent), or why not (values not handed out
        yet, or void already for another reason)."""

    async def confirm(self, asks: Sequence[ConfirmAsk]) -> list[Made]:
        """Record each confirmation, in order: True when new, False when made before, or why
        not (values not handed out yet, or void)."""

    async def checkpoint(self, lease: Lease, sequence: str, audits: Sequence[Audit]) -> None:
        """Advance the shard's checkpoint and write the frame's audit rows, each the next link
        of its chain; raise LeaseLost when `lease` is no longer current."""

    async def hold(self, lease: Lease, first: str, last: str, replies: bytes) -> int:
        """Keep the frame's encoded replies (sequences `first` to `last`); their id."""

    async def published(self, held: Sequence[int]) -> None:
        """Mark held replies as published."""


class Counters(Protocol):
    """Counter definitions, and how many values each has handed out (the edge's routes)."""

    async def create(self, counter: Counter) -> None:
        """Raise CounterExists when the name is taken."""

    async def get(self, name: str) -> Counter | None: ...

    async def get_many(self, names: Sequence[str]) -> dict[str, Counter]: ...

    async def page(self, after: str | None, limit: int) -> list[Counter]: ...

    async def allocated(self, name: str, period: str) -> int:
        """How many values the counter has handed out in `period`."""

    async def set_retention(self, name: str, days: int | None) -> Counter | None:
        """Change a counter's retention (None: the service's default); None if no counter."""

    async def ping(self) -> None: ...


class Leases(Protocol):
    """Who reads which shard (fenced leases, batchers' and edges' liveness), and shards read to
    their end."""

    async def acquire(
        self, stream: str, shard: str, owner: str, ttl: float, alone: bool = False
    ) -> Lease | None:
        """Take the shard's lease if it is free or expired (or ours); None when another holds it.
        `alone`: on a connection of its own, not the pool's."""

    async def members(self, stream: str, owner: str, ttl: float) -> list[str]:
        """Say that batcher `owner` is alive, and return the live batchers of `stream` (seen
        within `ttl` seconds), `owner` among them, in the order they joined: the shards are
        shared among these, the ones left over going to the earliest."""

    async def alive(self, stream: str, owner: str) -> None:
        """Say that batcher `owner` is alive (every ALIVE_EVERY_S, for /healthz)."""

    async def alive_batchers(self, stream: str, within: float) -> int:
        """How many batchers of `stream` said they were alive within `within` seconds."""

    async def leave(self, stream: str, owner: str) -> None:
        """Batcher `owner` stops: the others share its shards from their next look."""

    async def edge_seen(self, edge: str, settled: float, ended: bool = False) -> None:
        """Say that edge `edge` (its reply-key prefix) is alive, and that every request it began
        before `settled` (Unix seconds) is answered; `ended`: it stopped cleanly, every request
        it held answered."""

    async def dead_edges(self, edges: Collection[str], silent: float) -> dict[str, EdgeEnd]:
        """Of `edges`, those that died: not ended cleanly, silent for `silent` seconds."""

    async def release(self, lease: Lease, forget: bool) -> None: ...

    async def end(self, lease: Lease) -> None:
        """Mark the lease's shard as read to its end (a closed shard, after a reshard)."""

    async def ended(self, stream: str, shard: str) -> bool: ...


@dataclass(frozen=True)
class Rewind:
    """A period a batcher found below values it had handed out: `held` the highest of them,
    `last` the last value Postgres now says was handed out."""

    counter: str
    period: str
    held: int
    last: int
    detected_at: datetime


@dataclass(frozen=True)
class Mend:
    """What `RewindLog.mend` did: the rewind's `held` (None: none was recorded), and the
    period's last value handed out before and after."""

    counter: str
    period: str
    held: int | None
    before: int
    after: int


class RewindLog(Protocol):
    """Rewinds recorded by the batchers, and their mending by an operator."""

    async def rewinds(self, name: str | None = None) -> list[Rewind]: ...

    async def mend(self, name: str, period: str, past: int | None) -> Mend | None: ...


class Frames(Protocol):
    """A frame's one transaction, and the replies durable streams hold until published."""

    def frame(self) -> AbstractAsyncContextManager[FrameTransaction]: ...

    async def allocate_plain(
        self,
        lease: Lease,
        sequence: str,
        demand: Sequence[PlainDemand],
        audits: Sequence[Audit],
    ) -> dict[tuple[str, str], int]:
        """A plain frame in one transaction: add each demand's delta (not below its floor, as
        `FrameTransaction.allocate`), write the audit rows (`audits`, one per class, their
        ranges made from what was allocated), and move the
        lease's checkpoint to `sequence`, fenced by its epoch (LeaseLost, and nothing applied,
        if another batcher holds it now); the allocated totals by (counter, period)."""

    async def highest(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The highest value the audit trail holds for each (counter, period), among the
        counter's newest rows, or a rewind recorded and not mended holds: the floor below which
        a batcher refuses to allocate."""

    async def rewound(self, held: Mapping[tuple[str, str], int]) -> None:
        """Record that each (counter, period) is below its `held`, the highest value a batcher
        knows was handed out (kept at the greater of two records): a rewind, refused until
        an operator mends it."""

    async def committed(self, lease: Lease, sequence: str) -> list[Span] | None:
        """The (counter, period, first, last) ranges of the frame `lease` committed up to
        `sequence` (its checkpoint there, under its epoch), or None: whether a commit whose
        answer was lost (Postgres went away as it committed) took effect."""

    async def taken(self, holders: Sequence[Holder]) -> list[Claim]:
        """The Idempotency-Keys' answers that `holders`' records took, each still held under its
        key (no cancel has freed it): what of a lost commit is a key's, for its cancels to free."""

    async def unpublished(self, stream: str, shard: str) -> list[HeldReplies]:
        """Held replies of the shard's committed frames not known to be published, oldest first."""

    async def published(self, held: Sequence[int]) -> None: ...

    async def replayed(self, stream: str, shard: str, first: str, last: str) -> list[bytes]:
        """Held replies of the frames that overlap sequences `first` to `last`."""

    async def held_since(self, stream: str, shard: str, seconds: float) -> list[bytes]:
        """Held replies of the shard's frames committed in the last `seconds`, newest first."""

    async def prune(self, now: datetime, audit_retention: float, reply_retention: float) -> int:
        """Drop idempotency keys past their expiry, allocation rows and dead letters older than
        `audit_retention` seconds, and held replies older than `reply_retention`; how many went."""

    async def prune_chains(self, now: datetime) -> Pruned:
        """Drop the audit rows past their keep_until (`prune` does this first); how many went,
        and where each chain it pruned now starts (what a batcher anchors: a prune is an
        anchored event)."""


class ConfirmedRange(NamedTuple):
    """Values `first` to `last` of a period, confirmed (`Ledger.confirmed`)."""

    first: int
    last: int


class Overdue(NamedTuple):
    """Values `first` to `last` of `period` handed out long enough ago, neither confirmed nor
    void: the confirmation sweep voids them (`Ledger.unconfirmed`)."""

    period: str
    first: int
    last: int


class Unconfirmed(NamedTuple):
    """What the confirmation sweep found of one counter (`Ledger.unconfirmed`): the `overdue`
    spans, and the time up to which it may mark the counter swept (`Ledger.swept`)."""

    overdue: list[Overdue]
    upto: datetime


class Ledger(Protocol):
    """The audit trail: voids, confirmations and the hash chains."""

    async def trail(self, name: str) -> tuple[list[Link], dict[str, int]]:
        """Every kept audit row naming the counter, in commit order; and per period, the
        highest value whose row retention pruned."""

    async def voids(self, name: str, period: str) -> list[VoidRow]: ...

    async def confirmed(self, name: str, period: str) -> list[ConfirmedRange]:
        """The spans of the period confirmed (they may overlap)."""

    async def confirming(self) -> list[Counter]:
        """The counters that take confirmations."""

    async def unconfirmed(self, counter: Counter, ttl: float) -> Unconfirmed:
        """Values handed out over `ttl` seconds ago, since the last sweep, neither confirmed
        nor void; and the time the sweep may mark as done."""

    async def swept(self, name: str, upto: datetime) -> None: ...

    async def verify(
        self,
        name: str | None,
        anchors: Sequence[Anchor] | None = None,
        pruned_at: Mapping[str, Start] | None = None,
    ) -> dict[str, Any]:
        """Check the hash chains holding the counter's rows (every chain, for None), and the
        tables beside them against the chains (infra/trail.py); with `anchors` (heads kept
        outside Postgres), that the chains still hold them and only extend them; with
        `pruned_at` (each chain's newest anchored prune), that `chain_starts` agrees."""

    async def heads(self) -> dict[str, dict[str, Any]]:
        """Each chain's head: {chain: {"row", "hash", "at"}}."""

    async def holds(self, anchors: Sequence[Anchor]) -> list[Breach]:
        """What is wrong with the anchored heads against the trail now: each still a row of its
        chain with that hash (which covers its content), or pruned past; none for a trail
        that holds them all."""

    async def mark_edges(self, stream: str, silent: float, keep_s: float) -> int:
        """Chain the ends of the edges that ended or died and have none yet; how many."""


class Anchors(Protocol):
    """An append-only place outside Postgres that keeps the audit chains' heads: what
    `audit verify --heads` proves the trail against (infra/adapters/anchors.py)."""

    async def keep(self, record: Mapping[str, Any]) -> None:
        """Append one record: {"at": time, "by": batcher, "heads": {chain: {row, hash, at}}}."""

    async def since(self, mark: str) -> tuple[list[dict[str, Any]], str]:
        """The records kept after `mark` (any batcher's), and the mark after them: "" for
        the latest ones (at least the last day's), so that a batcher starting reads back
        what was anchored before it."""


class Keys(Protocol):
    """API keys, as stored (hashes), and news of their changes."""

    async def add_key(self, key: Key) -> Key:
        """Store a new key (KeyExists if an unrevoked key has its name); as stored."""

    async def keys(self) -> list[Key]:
        """Every key, revoked ones included."""

    async def key(self, key_id: str) -> Key | None:
        """The key with this id, revoked or not; None if there is none."""

    async def revoke_key(self, name: str) -> Key | None:
        """Revoke the unrevoked key of this name; None if there is none."""

    def key_changes(self) -> AsyncIterator[None]:
        """Yields once listening, then whenever a key is created or revoked anywhere; raises
        Unavailable when it cannot listen (the edge then relies on KEYS_REFRESH_S)."""

    async def touch_keys(self, used: Mapping[str, datetime]) -> None:
        """Record when keys (by id) were last used."""


class EdgeStore(Counters, Keys, Leases, Ledger, Protocol):
    """The roles an edge uses: all but Frames, which only batchers write."""


class BatcherStore(Counters, Leases, Frames, Ledger, Protocol):
    """The roles a batcher uses: all but Keys. Each of its jobs takes only its own."""


class Store(Counters, Leases, Frames, Ledger, Keys, Protocol):
    """Everything numerator keeps in Postgres: one adapter holds every role
    (infra/adapters/postgres/, a module per role), and each component is typed with the roles
    it uses."""
