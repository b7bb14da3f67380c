"""What the edge needs from the rest of the system, passed in once by whoever wires it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from functions.auth import Guard
from functions.flight import Flight
from functions.front import Front
from functions.limits import KeyRate
from infra.clock import utc_now
from infra.errors import NumeratorError
from infra.ledger import VoidReason
from infra.observe import traces
from infra.observe.health import ALIVE_EVERY_S, Health, responds
from infra.observe.metrics import Metrics
from infra.ports import EdgeStore, Replies, Stream
from infra.settings import Auth, Settings
from infra.wire import Cancel, Record, Void, edge_id, reply_key

if TYPE_CHECKING:  # the Lambda edge is deployed without the server's modules
    from infra.observe.workers import Workers

log = logging.getLogger("numerator.edge")

SETTLE_EVERY_S = 0.1
"""While it serves requests, an edge says since when all were answered this often (idle, every
ALIVE_EVERY_S): if it dies, the values issued to it after that moment are listed `unsure`, so
this bounds them to a few tenths of a second of its traffic."""
LAMBDA_MARGIN_S = 1.0
"""A request in Lambda is answered this long before the invocation's own time runs out: its
cancel's put (CANCEL_PUT_S) and the answer's way out within it. Raised from 0.5 s for the 502s
sam local's test met under load; those turned out to be the moto stand-in's (a frozen batcher's
half-sent request held its lock, numerator/motoserver.py): measured under load, the handler
answered with 922-994 ms left, its cancel's put at most 73 ms."""
CANCEL_PUT_S = 0.4  # a Lambda invocation's cancel is put within this, inside LAMBDA_MARGIN_S
TELL_S = 10.0
"""A long-running edge's cancel is put within this (the batcher allows CANCEL_MARGIN_S for it to
arrive): 0.4 s was shorter than a put to a slow stream takes, and a cancel lost that way left a
keyed request's values issued to no one."""


def nothing() -> None:
    return None


@asynccontextmanager
async def running(work: Coroutine[Any, Any, None], name: str) -> AsyncIterator[None]:
    """`work` runs as a task of its own while the block runs, and is cancelled after it."""
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@dataclass
class Edge:
    stream: Stream
    replies: Replies
    store: EdgeStore
    settings: Settings
    metrics: Metrics
    clock: Callable[[], datetime] = utc_now
    health: Health | None = None
    """What /healthz checks; by default that Postgres answers."""
    observe: Callable[[], None] = nothing
    """Refresh gauges just before /metrics renders them."""
    workers: Workers | None = None
    """The server's other worker processes (`--workers N`): /metrics adds theirs to its own."""
    front: Front | None = None
    """Front frames (the AWS path's long-running edge): /next without an Idempotency-Key goes
    through them, one record per counter per frame."""
    lane: bool = False
    """The lane (functions/lane.py; an embedded worker's edge): plain /next requests gathered per
    counter over one turn of the event loop, one record for them."""
    guard: Guard | None = field(default=None, init=False)
    """API keys (AUTH=keys): who may do what."""
    key_rate: KeyRate = field(init=False)
    flight: Flight = field(default_factory=Flight, init=False)
    """The requests for values this edge holds (for `living`)."""
    pending: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    """Cancels on their way, from requests whose own task was cancelled."""
    tell_s: float = TELL_S
    """How long a cancel (or a void of values no one took) may take to put: CANCEL_PUT_S in a
    Lambda invocation, which must end in time."""

    def __post_init__(self) -> None:
        settings = self.settings
        if settings.edge.auth is Auth.KEYS:
            self.guard = Guard(self.store, settings.edge.keys_refresh_s, self.metrics)
        self.key_rate = KeyRate(settings.edge.idempotency_keys_per_s)
        if self.health is None:
            self.health = Health({"store": responds(self.store.ping)})
        if traces.ON:  # its puts and its replies' waits as trace spans
            self.stream, self.replies = traces.traced(self.stream, self.replies)

    async def give_up(self, record: Record) -> None:
        """Say on the stream that no client will read this record's reply (its reply timed out,
        its client went away): if the batcher has not applied it yet, it allocates nothing;
        if it has, its values become void, `abandoned`."""
        who = record.who if isinstance(record.who, str) else ""
        await self._tell(Cancel(record.key, record.counter, record.idempotency_key, who))

    def give_up_later(self, record: Record, after: asyncio.Future[None] | None = None) -> None:
        """give_up from a task of its own: for a request whose own task is being cancelled;
        once `after` (the record's put) is done, if given."""

        async def then() -> None:
            if after is not None:
                await asyncio.wait([after])
                if not after.cancelled() and after.exception() is not None:
                    return  # it was not put: there is nothing to cancel
            await self.give_up(record)

        task = asyncio.get_running_loop().create_task(then())
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def abandon(self, counter: str, first: int, last: int, day: date, who: str) -> None:
        """Void values an edge got but could not deliver (a front frame's requests whose client
        went away), reason `abandoned`."""
        await self._tell(
            Void(reply_key(), counter, first, last, VoidReason.ABANDONED, None, who, day=day)
        )

    async def _tell(self, demand: Cancel | Void) -> None:
        """Put a record no one awaits the answer of, within `tell_s` (so that a Lambda
        invocation ends in time); one that cannot be put is logged."""
        try:
            async with asyncio.timeout(self.tell_s):
                await self.stream.put((demand,))
        except (NumeratorError, TimeoutError) as exc:
            log.warning(
                "could not put %s for %s of %s: %s",
                type(demand).__name__.lower(),
                demand.key,
                demand.counter,
                exc,
            )
            return
        self.metrics.records_put.inc()

    @asynccontextmanager
    async def living(self) -> AsyncIterator[None]:
        """While the block runs, say every ALIVE_EVERY_S that this edge is alive and since when
        all its requests were answered (Flight.mark), and when it ends that it stopped cleanly:
        the ledger lists the values issued to an edge that died (no clean stop) after that
        moment as `unsure`, their replies may not have reached their clients."""

        async def settle() -> None:
            said = 0.0
            while True:
                now = time.monotonic()
                if self.flight.moved or now - said >= ALIVE_EVERY_S:
                    said = now
                    try:
                        await self.store.edge_seen(edge_id(), self.flight.mark())
                    except NumeratorError as exc:
                        log.warning("could not say edge %s is alive: %s", edge_id(), exc)
                await asyncio.sleep(SETTLE_EVERY_S)

        try:
            async with running(settle(), "edge-alive"):
                yield
        finally:
            try:
                await self.store.edge_seen(edge_id(), self.flight.mark(), ended=True)
            except NumeratorError as exc:
                log.warning("could not say edge %s stopped: %s", edge_id(), exc)

    @asynccontextmanager
    async def following_keys(self) -> AsyncIterator[None]:
        """While the block runs, a key created or revoked anywhere is known here at once
        (Guard.follow): for a long-running edge, not a Lambda container."""
        if self.guard is None:
            yield
            return
        async with running(self.guard.follow(), "keys"):
            yield

    def observed(self) -> Metrics:
        """This process's metrics, its gauges refreshed."""
        self.observe()
        self.metrics.sample()
        return self.metrics

    def timeout(self, context: Any = None) -> float:
        """Seconds a request waits for its reply: REPLY_TIMEOUT_S, and in Lambda no longer than
        the invocation has left (less a margin), so that it is answered 504 before Lambda kills
        it. `context` is the Lambda context Mangum puts in the ASGI scope, if any."""
        timeout = self.settings.edge.reply_timeout_s
        if context is not None:
            left = context.get_remaining_time_in_millis() / 1000 - LAMBDA_MARGIN_S
            timeout = max(0.05, min(timeout, left))
        return timeout

    @staticmethod
    def budget(timeout: float) -> float:
        """Seconds a record may wait for its frame: a little less than the reply timeout, so that
        a record the batcher cannot apply in time is answered 503 before the client's 504."""
        return timeout - min(0.5, timeout / 4)
