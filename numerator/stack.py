"""The embedded stack: in-process stream and replies, the batcher in this process, Postgres."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from types import TracebackType

from starlette.applications import Starlette

from batcher.worker import Batcher
from functions.app import create_app
from functions.edge import Edge
from functions.fastpath import FastPath
from infra import __version__
from infra.clock import utc_now
from infra.memory import MemoryReplies, MemoryStream
from infra.metrics import Metrics
from infra.postgres import PostgresStore, migrate
from infra.server import tune_gc
from infra.settings import Settings


class Stack:
    """Everything one process needs to serve /next in embedded mode. Several processes may each
    run one against the same Postgres: every batcher's UPDATE is atomic, so values stay unique."""

    def __init__(self, settings: Settings, clock: Callable[[], datetime] = utc_now) -> None:
        if not settings.database_url:
            raise ValueError("the stack needs settings.database_url")
        self.settings = settings
        self.metrics = Metrics()
        self.store = PostgresStore(settings.database_url, settings.pool_max)
        self.stream = MemoryStream(settings.stream_capacity)
        self.replies = MemoryReplies(self.metrics)
        self.batcher = Batcher(self.stream, self.replies, self.store, settings, self.metrics, clock)
        self.metrics.info.labels = {
            "version": __version__,
            "mode": "embedded",
            "back_frame_ms": f"{settings.back_frame_ms:g}",
            "frame_max_records": str(settings.frame_max_records),
            "workers": os.environ.get("NUMERATOR_WORKERS", "1"),
            "shards": "1",
        }
        self.edge = Edge(
            stream=self.stream,
            replies=self.replies,
            store=self.store,
            settings=settings,
            metrics=self.metrics,
            clock=clock,
            healthy=lambda: self.batcher.healthy,
            observe=lambda: self.metrics.stream_depth.set(len(self.stream)),
        )

    async def __aenter__(self) -> Stack:
        await migrate(self.settings.database_url)
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

    def app(self) -> FastPath:
        return create_app(self.edge)


def app_from_env() -> FastPath:
    """The app a server worker runs: settings from the environment, its own stack."""
    settings = Settings.from_env()
    tune_gc()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with Stack(settings) as stack:
            app.state.edge = stack.edge
            yield

    return create_app(lifespan=lifespan)
