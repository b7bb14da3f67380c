"""The AWS path's Stream and Replies, made from settings: what the Lambda handler, the server
workers and `numerator batcher` each build once per process (per Lambda container)."""

from __future__ import annotations

from dataclasses import dataclass

from infra.adapters.aws import AwsCaller, Clients, clients
from infra.adapters.beats import reply_lag
from infra.adapters.dynamodb import DynamoReplies
from infra.adapters.kinesis import KinesisStream
from infra.observe.health import BATCHER_ALIVE_S, Check, responds
from infra.observe.metrics import Metrics
from infra.ports import EdgeStore
from infra.settings import ReadBeats, Settings


@dataclass
class AwsPorts:
    clients: Clients
    calls: AwsCaller
    stream: KinesisStream
    replies: DynamoReplies

    def close(self) -> None:
        self.calls.close()

    def checks(self) -> dict[str, Check]:
        """/healthz's checks of the stream and the reply table."""
        return {
            "stream": responds(self.stream.ping),
            "replies": responds(self.replies.ping),
            "calls": self.calls.outcomes.check,
        }

    def edge_checks(self, store: EdgeStore) -> dict[str, Check]:
        """An edge's /healthz on the AWS path: Postgres, the stream, the reply table, and a
        live batcher (one that said so within BATCHER_ALIVE_S): without one, every /next would
        wait for its 504."""

        async def batchers() -> str | None:
            stream = await self.stream.identity()
            if await store.alive_batchers(stream, BATCHER_ALIVE_S) == 0:
                return f"no batcher said it was alive in the last {BATCHER_ALIVE_S:g} s"
            return None

        # `store.ping` read when the check runs, not now: a Lambda's store is made (psycopg
        # imported) on first use (functions/handler.py, LazyStore)
        return {"store": responds(lambda: store.ping()), **self.checks(), "batchers": batchers}


def aws_ports(settings: Settings, metrics: Metrics, found: Clients | None = None) -> AwsPorts:
    found = found or clients(settings)
    calls = AwsCaller(settings.aws.aws_threads, metrics)
    read_interval = settings.aws.read_interval_ms / 1000
    stream = KinesisStream(
        found.kinesis,
        calls,
        settings.aws.stream_name,
        metrics,
        spread=settings.aws.partition_spread,
        read_interval=read_interval,
        phased=settings.aws.read_beats is ReadBeats.PHASED,
    )
    replies = DynamoReplies(
        found.dynamodb,
        calls,
        settings.aws.reply_table,
        metrics,
        settings.retention.reply_ttl_s,
        interval=read_interval,
        lag=reply_lag(settings),
        phase=stream.phase,
        overdue=stream.placement.slow,  # phased beats: a shard no one reads is passed over
        replied=stream.placement.heard,
    )
    return AwsPorts(found, calls, stream, replies)
