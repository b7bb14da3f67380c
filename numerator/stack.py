"""The stacks a numerator process runs, wired from settings:

- `EmbeddedStack`: embedded mode — in-process stream and replies, the batcher in this process,
  Postgres;
- `EdgeStack`: the AWS path's edge — HTTP workers that put records on Kinesis and await replies in
  DynamoDB (Postgres only for counter CRUD);
- `BatcherStack`: the AWS path's batcher — reads Kinesis, applies frames to Postgres, writes
  replies to DynamoDB (`numerator batcher`);
- `HubStack` and `HubEdgeStack`: two tiers on one machine (`up --workers N`) — the machine's
  batcher, and each HTTP worker handing it front frames over a unix socket.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from starlette.applications import Starlette

from batcher.worker import Batcher
from functions.app import create_app
from functions.edge import Edge, running
from functions.fastpath import FastPath
from functions.front import Front
from infra import __version__
from infra.adapters.anchors import anchors_to
from infra.adapters.aws import Clients, check
from infra.adapters.hub import Hub, HubStream
from infra.adapters.memory import MemoryReplies, MemoryStream
from infra.adapters.postgres import PostgresStore, migrate
from infra.adapters.push import Inbox, Pusher, outward
from infra.adapters.pushkeys import held
from infra.adapters.serverless import AwsPorts, aws_ports
from infra.clock import utc_now
from infra.faults import Faults
from infra.observe import traces
from infra.observe.health import Check, Health, responds
from infra.observe.metrics import Metrics
from infra.observe.workers import sharing, workers_dir
from infra.ports import Replies, Stream
from infra.run.server import collecting, tune_gc, worker_signals
from infra.settings import FrontPolicy, Mode, ReplyItems, Settings
from infra.wire import edge_id, new_edge, read_grouped

log = logging.getLogger("numerator.edge")


def describe(metrics: Metrics, settings: Settings, role: str) -> None:
    """numerator_info: what this process is, so that a scrape (and the bench) can tell."""
    metrics.info.labels = {
        "version": __version__,
        "mode": settings.mode,
        "role": role,
        "back_frame_ms": f"{settings.frames.back_frame_ms:g}",
        "frame_max_records": str(settings.frames.frame_max_records),
        "frame_policy": settings.frames.frame_policy,
        "workers": str(settings.local.workers),
        "shards": "1" if settings.mode is Mode.EMBEDDED else str(settings.aws.shards),
    }


class BatcherStack:
    """The AWS path's batcher (`numerator batcher`): Kinesis in, Postgres, DynamoDB out."""

    role = "batcher"

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], datetime] = utc_now,
        owner: str | None = None,
        faults: Faults | None = None,
    ) -> None:
        """`faults`: the crash tests' switches, read from the environment by the caller."""
        if not settings.database.database_url:
            raise ValueError("the batcher needs settings.database.database_url")
        faults = faults or Faults()
        self.settings = settings
        traces.configure(settings.tracing, self.role)
        self.metrics = Metrics()
        describe(self.metrics, settings, self.role)
        self.store = PostgresStore(
            settings.database.database_url,
            settings.database.pool_max,
            faults=faults,
            pooled=settings.database.pooled,
        )
        self.aws: AwsPorts | None = None
        self.stream, self.replies = self.ports()
        self.pusher = Pusher(None)  # its keys once read (AWS path)
        self.running = AsyncExitStack()
        self.batcher = Batcher(
            self.stream,
            self.replies,
            self.store,
            settings,
            self.metrics,
            clock,
            owner,
            anchors_to(settings.retention.anchor_to),
            faults,
            self.pusher,
        )
        self.health = Health(self.checks(), alerts=self.batcher.alerts)

    def checks(self) -> dict[str, Check]:
        """What this process's /healthz checks: Postgres, the batcher's own loops, and the
        stream and reply table where they are AWS's."""
        checks = {"store": responds(self.store.ping), "batcher": self.batcher_check}
        if self.aws is not None:
            checks.update(self.aws.checks())
        return checks

    def observed(self) -> Metrics:
        """This process's metrics, sampled (a scrape, or the workers' directory)."""
        self.metrics.sample()
        return self.metrics

    async def batcher_check(self) -> str | None:
        trouble = self.batcher.trouble
        return f"retrying: {', '.join(trouble)}" if trouble else None

    def ports(self) -> tuple[Stream, Replies]:
        self.aws = aws_ports(self.settings, self.metrics)
        return self.aws.stream, self.aws.replies

    async def __aenter__(self) -> Self:
        if self.aws is not None:
            await check(self.aws.clients, self.aws.calls, self.settings)
            self.pusher.keys = await self.running.enter_async_context(held(self.settings.aws))
            if self.pusher.keys is None:
                log.warning("no PUSH_KEYS or PUSH_KEY_SECRET_ARN: replies are not pushed")
        await migrate(self.settings.database.database_url, self.settings.database.pooled)
        await self.store.open()
        await self.batcher.start()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.batcher.stop()
        await self.store.close()
        await self.running.aclose()
        if self.aws is not None:
            self.aws.close()
        traces.flush()  # a worker stopping sends its last trace spans (none when off)


class EmbeddedStack(BatcherStack):
    """Everything one process needs to serve /next in embedded mode: the batcher above on an
    in-process stream and replies, and the edge. Several processes may each run one against the
    same Postgres: every batcher's UPDATE is atomic, so values stay unique."""

    role = "edge+batcher"

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], datetime] = utc_now,
        faults: Faults | None = None,
    ) -> None:
        if not settings.database.database_url:
            raise ValueError("the stack needs settings.database.database_url")
        super().__init__(settings, clock, faults=faults)
        self.edge = Edge(
            stream=self.stream,
            replies=self.replies,
            store=self.store,
            settings=settings,
            metrics=self.metrics,
            clock=clock,
            health=self.health,
            observe=lambda: self.metrics.stream_depth_records.set(len(self.memory)),
            lane=settings.edge.front_frame_ms > 0,  # FRONT_FRAME_MS=0: a record a request
        )

    def ports(self) -> tuple[Stream, Replies]:
        self.memory = MemoryStream(self.settings.edge.stream_capacity)
        return self.memory, MemoryReplies(self.metrics)

    def app(self) -> FastPath:
        return create_app(self.edge)


class HubStack(BatcherStack):
    """The machine's batcher (two tiers on one machine, `numerator batcher --hub SOCKET`, which
    `up --workers N` starts): its workers' front frames in over a unix socket, onto an
    in-process stream, Postgres, and each reply back to its worker."""

    def ports(self) -> tuple[Stream, Replies]:
        self.memory = MemoryStream(self.settings.edge.stream_capacity)
        self.hub = Hub(self.settings.local.hub, self.memory, self.metrics, self.troubled)
        return self.memory, self.hub

    def troubled(self) -> str:
        """What its workers' /healthz says of it: its frames' retries (Postgres away)."""
        trouble = self.batcher.trouble
        return f"retrying: {', '.join(trouble)}" if trouble else ""

    def observed(self) -> Metrics:
        self.metrics.stream_depth_records.set(len(self.memory))
        self.metrics.sample()
        return self.metrics

    async def __aenter__(self) -> Self:
        await super().__aenter__()
        await self.hub.open()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await super().__aexit__(kind, exc, tb)  # its open frame's replies sent first
        finally:
            self.hub.close()


class FrontStack:
    """An edge process with front frames and no batcher of its own: the AWS path's server edge
    (`EdgeStack`), and an HTTP worker of two tiers on one machine (`HubEdgeStack`). Postgres for
    counter CRUD and the edge's own rows."""

    edge: Edge

    def __init__(self, settings: Settings, clock: Callable[[], datetime]) -> None:
        self.settings, self.clock = settings, clock
        traces.configure(settings.tracing, "edge")
        self.metrics = Metrics()
        describe(self.metrics, settings, "edge")
        self.store = PostgresStore(
            settings.database.database_url,
            settings.database.pool_max,
            pooled=settings.database.pooled,
        )

    def serving(self, stream: Stream, replies: Replies, health: Health, lane: bool = False) -> None:
        """The edge on `stream` and `replies`, its front frames as the subclass says; `lane`:
        plain /next through the lane (functions/lane.py) beside them."""
        self.edge = Edge(
            stream=stream,
            replies=replies,
            store=self.store,
            settings=self.settings,
            metrics=self.metrics,
            clock=self.clock,
            health=health,
            lane=lane,
        )
        if self.settings.edge.front_frame_ms > 0:
            self.edge.front = Front(
                self.edge.stream,  # traced when this process traces
                self.edge.replies,
                self.metrics,
                self.settings.edge.front_frame_ms / 1000,
                self.edge.budget,
                give_up=self.edge.give_up,
                abandon=self.edge.abandon,
                **self.framing(),
            )

    def framing(self) -> dict[str, Any]:
        """When a front frame closes: Front's `auto`, `gap` and `before_beat`."""
        return {}

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.edge.front is not None:  # the open front frame sent, the frames in flight ended
            await self.edge.front.close()
        await self.release()
        await self.store.close()
        traces.flush()  # a worker stopping sends its last trace spans (none when off)

    async def release(self) -> None:
        """What the subclass holds besides the store, let go once its frames have ended."""

    def app(self) -> FastPath:
        return create_app(self.edge)


class HubEdgeStack(FrontStack):
    """An HTTP worker of two tiers on one machine (HUB set): its front frames handed to the
    machine's batcher over a unix socket (infra/adapters/hub.py)."""

    def __init__(self, settings: Settings, clock: Callable[[], datetime] = utc_now) -> None:
        super().__init__(settings, clock)
        replies = MemoryReplies(self.metrics)
        self.hub = HubStream(settings.local.hub, replies, self.lost)
        checks = {"store": responds(self.store.ping), "batcher": self.hub_check}
        # plain /next through the lane, as one worker's: its front frames take the rest
        self.serving(self.hub, replies, Health(checks), lane=settings.edge.front_frame_ms > 0)

    def framing(self) -> dict[str, Any]:
        # A frame a put: the next closes once the batcher has taken the last one, on the loop's
        # next turn (with FRAME_MIN_MS's gap, 0.87 of one worker's rate at 64 connections
        # against 0.93 without: docs/performance.md).
        return {"auto": self.settings.edge.front_frame_policy is not FrontPolicy.FIXED, "gap": 0.0}

    async def hub_check(self) -> str | None:
        return self.hub.unwell()

    def lost(self, waited: int, untaken: int) -> None:
        """The machine's batcher went away with `waited` records' replies owed (their requests
        answered 504) and `untaken` puts it had not said it took (their requests answered 503):
        whether their values were issued no one here can tell. This worker leaves its edge to
        be taken for dead (the ledger lists what was issued to it since its last mark `unsure`)
        and goes on as a new one."""
        old = edge_id()
        new = new_edge()
        log.warning(
            "lost the machine's batcher with %d records' replies owed (their requests answered "
            "504) and %d puts not yet taken (answered 503): edge %s is left for dead, its values "
            "since its last mark unsure; serving on as edge %s",
            waited,
            untaken,
            old,
            new,
        )

    async def __aenter__(self) -> HubEdgeStack:
        if self.settings.database.database_url:
            await self.store.open()
        await self.hub.open(patience=10.0)
        return self

    async def release(self) -> None:
        await self.hub.close()


class EdgeStack(FrontStack):
    """The AWS path's edge in a long-running process: no batcher here."""

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], datetime] = utc_now,
        found: Clients | None = None,
    ) -> None:
        """`found`: the AWS clients to use (`infra.adapters.aws.clients`), when not those this
        process's environment configures."""
        super().__init__(settings, clock)
        if settings.edge.reply_items is ReplyItems.FRAME:  # its replies a frame at a time
            read_grouped()
        self.aws: AwsPorts = aws_ports(settings, self.metrics, found)
        self.inbox: Inbox | None = None  # pushed replies, once open (with push keys)
        self.running = AsyncExitStack()
        self.serving(self.aws.stream, self.aws.replies, Health(self.aws.edge_checks(self.store)))

    def framing(self) -> dict[str, Any]:
        policy = self.settings.edge.front_frame_policy
        beats = self.aws.stream.before_beat if policy is FrontPolicy.BEATS else None
        return {
            "auto": policy is FrontPolicy.AUTO,
            "gap": self.settings.frames.frame_min_ms / 1000,
            "before_beat": beats,
        }

    async def __aenter__(self) -> EdgeStack:
        await check(self.aws.clients, self.aws.calls, self.settings)
        if self.settings.database.database_url:
            await self.store.open()
        push = self.settings.edge.reply_push
        if self.edge.front is not None and push != "off":
            keys = await self.running.enter_async_context(held(self.settings.aws))
            if keys is None:
                log.warning(
                    "REPLY_PUSH: no PUSH_KEYS or PUSH_KEY_SECRET_ARN, so no push can be "
                    "trusted: replies are read from the reply table alone"
                )
                return self
            self.inbox = Inbox(
                self.aws.replies.pushed,
                outward() if push == "auto" else push,
                keys,
                self.metrics.pushes_dropped.inc,
            )
            self.edge.front.to = await self.inbox.open()
        return self

    async def release(self) -> None:
        if self.inbox is not None:
            self.inbox.close()
        await self.running.aclose()
        self.aws.close()


def app_from_env() -> FastPath:
    """The app a server worker runs: settings from the environment, its own stack (embedded, or
    the AWS path's edge when MODE=aws)."""
    settings = Settings.from_env()
    tune_gc()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        worker_signals()
        stack: EdgeStack | HubEdgeStack | EmbeddedStack
        if settings.mode is Mode.AWS:
            stack = EdgeStack(settings)
        elif settings.local.hub:  # a worker of two tiers: the machine's batcher is apart
            stack = HubEdgeStack(settings)
        else:
            stack = EmbeddedStack(settings, faults=Faults.from_env())
        async with stack as serving, AsyncExitStack() as shared:
            app.state.edge = edge = serving.edge
            await shared.enter_async_context(running(collecting(), "gc"))
            if settings.database.database_url:  # stops last: after the requests it held
                await shared.enter_async_context(edge.living())
            await shared.enter_async_context(edge.following_keys())
            if settings.mode is Mode.AWS and settings.frames.emf_interval_s:
                from infra.observe.emf import writing

                every = settings.frames.emf_interval_s
                await shared.enter_async_context(writing(serving.metrics, "server", every))
            directory = workers_dir()
            if directory is not None:
                edge.workers = await shared.enter_async_context(sharing(directory, edge.observed))
            yield

    return create_app(lifespan=lifespan)
