"""The AWS path's Stream and Replies, made from settings: what the Lambda handler, the server
workers and `numerator batcher` each build once per process (per Lambda container)."""

from __future__ import annotations

from dataclasses import dataclass

from infra.aws import Calls, Clients, clients
from infra.dynamodb import DynamoReplies
from infra.kinesis import KinesisStream
from infra.metrics import Metrics
from infra.settings import Settings


@dataclass
class AwsPorts:
    clients: Clients
    calls: Calls
    stream: KinesisStream
    replies: DynamoReplies

    def close(self) -> None:
        self.calls.close()


def aws_ports(settings: Settings, metrics: Metrics, found: Clients | None = None) -> AwsPorts:
    found = found or clients(settings)
    calls = Calls(settings.aws_threads, metrics)
    read_interval = settings.read_interval_ms / 1000
    stream = KinesisStream(
        found.kinesis,
        calls,
        settings.stream_name,
        metrics,
        spread=settings.partition_spread,
        read_interval=read_interval,
    )
    # A reply is expected about half a read interval (the batcher's wait for the record), a frame
    # and a commit after the put.
    expected = read_interval / 2 + settings.back_frame_ms / 1000 + 0.02
    replies = DynamoReplies(
        found.dynamodb, calls, settings.reply_table, metrics, settings.reply_ttl_s, expected
    )
    return AwsPorts(found, calls, stream, replies)
