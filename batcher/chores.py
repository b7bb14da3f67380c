"""What a batcher does besides its frames, each on its own clock: the sweep of values not
confirmed in time, the chaining of edges' ends and the anchoring of the chains' heads, and the
pruning of what retention lets go."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from batcher.stopping import Stopping
from infra.clock import utc_now
from infra.errors import NumeratorError
from infra.ledger import VoidReason
from infra.observe.metrics import Metrics
from infra.ports import Anchors, Frames, Ledger, Overdue, Stream
from infra.settings import RetentionSettings
from infra.trail import Anchor, Start, anchored_in, newest
from infra.wire import MAX_VOID, Void, reply_key

log = logging.getLogger("numerator.batcher")

PRUNE_EVERY_S = 60.0
MARK_EVERY_S = 1.0  # the ends of edges are chained within this of being known
# An edge silent this long is chained as dead: well past EDGE_DEAD_S (when the report begins to
# list its values as unsure, from its `edges` row), so that an edge that was only stalled for a
# few seconds and comes back is not marked dead for good.
MARK_DEAD_S = 30.0


def not_confirmed(counter: str, spans: Sequence[Overdue]) -> list[Void]:
    """The void records, reason not-confirmed, for a counter's overdue spans, each at most
    MAX_VOID values."""
    return [
        Void(
            reply_key(),
            counter,
            first,
            min(span.last, first + MAX_VOID - 1),
            VoidReason.NOT_CONFIRMED,
            span.period,
        )
        for span in spans
        for first in range(span.first, span.last + 1, MAX_VOID)
    ]


class Sweep:
    """Void, not-confirmed, the values of counters that take confirmations which were not
    confirmed within CONFIRM_TTL_S: as void records on the stream, which the frames check
    again (a value confirmed meanwhile is not voided). Every batcher sweeps; the same void
    twice is made once."""

    def __init__(
        self, stream: Stream, ledger: Ledger, retention: RetentionSettings, stopping: Stopping
    ) -> None:
        self.stream, self.ledger, self.ttl = stream, ledger, retention.confirm_ttl_s
        self.stopping = stopping

    async def run(self) -> None:
        every = min(60.0, max(0.5, self.ttl / 4))
        while await self.stopping.pause(every):
            try:
                await self.once()
            except NumeratorError as exc:
                log.warning("cannot sweep unconfirmed values: %s", exc)

    async def once(self) -> None:
        for counter in await self.ledger.confirming():
            found = await self.ledger.unconfirmed(counter, self.ttl)
            voids = not_confirmed(counter.name, found.overdue)
            if voids:
                await self.stream.put(voids)
                log.info("%s: %d span(s) not confirmed in time", counter.name, len(voids))
            await self.ledger.swept(counter.name, found.upto)


class Silence:
    """How long an edge must have been silent to be chained dead, from this batcher's view of
    Postgres: while Postgres was away no edge could say it was alive, so for `silent` seconds
    after an outage the outage's length is added. Through an outage of minutes every edge was
    silent, and the first mark after it raced the edges' first word: a live edge was chained
    dead, and every value it handed out after was listed unsure (tests/e2e/test_long_outage.py).
    Times are monotonic seconds."""

    def __init__(self, silent: float) -> None:
        self.silent = silent
        self.reached: float | None = None  # when Postgres last answered
        self.away_since: float | None = None  # when it last answered before failing since
        self.away_s = 0.0  # how long the last outage lasted
        self.back = -math.inf  # when it ended

    def failed(self, now: float) -> None:
        if self.away_since is None:
            self.away_since = self.reached if self.reached is not None else now

    def answered(self, now: float) -> None:
        if self.away_since is not None:
            self.away_s, self.back, self.away_since = now - self.away_since, now, None
        self.reached = now

    def dead_after(self, now: float) -> float:
        """The silence, in seconds, after which an edge is chained dead now."""
        if self.away_since is not None:  # this try may be the first one back
            return self.silent + now - self.away_since
        if now - self.back < self.silent:
            return self.silent + self.away_s
        return self.silent


class Anchoring:
    """Chain the ends of edges that ended or died (the report reads them from the chain), and
    keep the chains' heads outside Postgres every ANCHOR_EVERY_S (when ANCHOR_TO names where):
    from then on a rewrite of the trail before those heads shows. Before it anchors, it proves
    the trail still holds the heads anchored last, by any batcher (read back from the sink);
    when it does not, it anchors nothing — a rewrite's forged heads never join the true ones —
    and raises the alert: numerator_anchors_refused_total, a log line, and /healthz's
    `alerts` naming the chain and row."""

    def __init__(
        self,
        stream: Stream,
        ledger: Ledger,
        anchors: Anchors | None,
        owner: str,
        retention: RetentionSettings,
        stopping: Stopping,
        metrics: Metrics | None = None,
        alerts: dict[str, str] | None = None,
    ) -> None:
        self.stream, self.ledger, self.anchors, self.owner = stream, ledger, anchors, owner
        self.retention, self.stopping = retention, stopping
        self.metrics = metrics or Metrics()
        self.alerts = {} if alerts is None else alerts
        self.mark = ""  # how far the sink was read back
        self.last: list[Anchor] = []  # each chain's newest anchored heads

    async def run(self) -> None:
        due = 0.0
        silence = Silence(MARK_DEAD_S)
        while await self.stopping.pause(MARK_EVERY_S):
            try:
                keep = self.retention.audit_retention_s
                now = time.monotonic()
                await self.ledger.mark_edges(self.stream.name, silence.dead_after(now), keep)
                silence.answered(now)
            except NumeratorError as exc:
                silence.failed(now)
                log.warning("cannot chain the ends of edges: %s", exc)
            if self.anchors is None or time.monotonic() < due:
                continue
            try:
                await self.anchor()
                due = time.monotonic() + self.retention.anchor_every_s
            except NumeratorError as exc:
                log.warning("cannot keep the audit heads in %r: %s", self.anchors, exc)

    async def anchor(self) -> dict[str, Any] | None:
        """Keep the chains' heads in the anchor sink now, once the trail is proven to hold
        those anchored last; the record kept, or None when the trail does not hold them."""
        assert self.anchors is not None
        found, self.mark = await self.anchors.since(self.mark)
        self.last = newest([*self.last, *(a for r in found for a in anchored_in(r))])
        wrong = await self.ledger.holds(self.last)
        if wrong:
            first = wrong[0]
            alert = f"not anchoring: chain {first.chain} row {first.row} {first.why}" + (
                f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
            )
            if self.alerts.get("trail") != alert:
                log.error("the trail no longer holds the heads anchored before it: %s", alert)
            self.alerts["trail"] = alert
            self.metrics.anchors_refused.inc()
            return None
        self.alerts.pop("trail", None)
        heads = await self.ledger.heads()
        record = {"at": utc_now().isoformat(), "by": self.owner, "heads": heads}
        await self.anchors.keep(record)
        self.last = newest([*self.last, *anchored_in(record)])
        return record


class Prune:
    """Drop what retention lets go: expired idempotency keys, old audit rows, dead letters and
    held replies. Where a prune leaves each chain is anchored (when ANCHOR_TO names where):
    `audit verify --heads` holds `chain_starts` to it, so that rows deleted with the start
    forged to match do not pass for retention's work."""

    def __init__(
        self,
        frames: Frames,
        retention: RetentionSettings,
        stopping: Stopping,
        anchors: Anchors | None = None,
        owner: str = "",
    ) -> None:
        self.frames, self.retention, self.stopping = frames, retention, stopping
        self.anchors, self.owner = anchors, owner
        self.unanchored: dict[str, Start] = {}  # pruned, not yet kept in the sink

    async def run(self) -> None:
        while await self.stopping.pause(PRUNE_EVERY_S):
            try:
                await self.once()
            except NumeratorError as exc:
                log.warning("cannot prune expired keys and old audit rows: %s", exc)

    async def once(self, now: datetime | None = None) -> dict[str, Any] | None:
        """Prune as of `now`; the anchor record of where the chains now start, if any were
        pruned."""
        now = now or utc_now()
        self.unanchored.update((await self.frames.prune_chains(now)).starts)
        record = None
        if self.anchors is not None and self.unanchored:
            starts = {
                chain: {"after_id": s.after_id, "after_hash": s.after_hash.hex()}
                for chain, s in sorted(self.unanchored.items())
            }
            record = {"at": now.isoformat(), "by": self.owner, "heads": {}, "starts": starts}
            await self.anchors.keep(record)
            self.unanchored.clear()
        await self.frames.prune(now, self.retention.audit_retention_s, self.retention.reply_ttl_s)
        return record
