"""The AWS endpoint the tests talk to: the one AWS_ENDPOINT_URL names (LocalStack, say), else moto
server started on a free loopback port — a real HTTP endpoint, spoken to by the real boto3 clients.
Each test makes its own stream and table, so that tests never see each other's records."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from batcher.worker import Batcher
from infra.adapters.aws import Clients, clients, create
from infra.adapters.postgres import PostgresStore
from infra.adapters.serverless import AwsPorts, aws_ports
from infra.observe.metrics import Metrics
from infra.run.server import free_port
from infra.settings import Settings

DEFAULTS = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
}


@contextmanager
def endpoint() -> Iterator[str]:
    for variable, value in DEFAULTS.items():
        os.environ.setdefault(variable, value)
    given = os.environ.get("AWS_ENDPOINT_URL")
    if given:
        yield given
        return
    from numerator.motoserver import server

    port = free_port()
    running = server("127.0.0.1", port)
    thread = threading.Thread(target=running.serve_forever, name="moto", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    os.environ["AWS_ENDPOINT_URL"] = url
    try:
        yield url
    finally:
        del os.environ["AWS_ENDPOINT_URL"]
        running.shutdown()
        thread.join()
        running.server_close()


@contextmanager
def resources(settings: Settings, shards: int = 1) -> Iterator[tuple[Settings, Clients]]:
    """A stream and a reply table of this test's own, deleted afterwards."""
    suffix = uuid.uuid4().hex[:10]
    own = settings.but(
        mode="aws",
        stream_name=f"test-{suffix}",
        reply_table=f"test-replies-{suffix}",
        shards=shards,
    )
    found = clients(own)
    create(found, own)
    try:
        yield own, found
    finally:
        found.kinesis.delete_stream(StreamName=own.aws.stream_name, EnforceConsumerDeletion=True)
        found.dynamodb.delete_table(TableName=own.aws.reply_table)


class Throttle:
    """Makes one client's calls of one operation answer a throttling error, injected at the
    client with botocore's `before-call` hook (the request never leaves): `times` calls, or every
    call while `on` is True. `calls` counts the calls refused."""

    def __init__(self, client: Any, operation: str, code: str, times: int = 0) -> None:
        self.client, self.code = client, code
        self.event = f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}"
        self.left, self.on, self.calls = times, times == 0, 0

    def _hook(self, **_: Any) -> tuple[SimpleNamespace, dict[str, Any]] | None:
        if not self.on and self.left <= 0:
            return None
        self.left -= 1
        self.calls += 1
        error = {"Code": self.code, "Message": "injected by the test"}
        return SimpleNamespace(status_code=400), {"Error": error, "ResponseMetadata": {}}

    def __enter__(self) -> Throttle:
        self.client.meta.events.register(self.event, self._hook)
        return self

    def __exit__(self, *_: object) -> None:
        self.client.meta.events.unregister(self.event, self._hook)


async def started(settings: Settings, found: Any, store: PostgresStore) -> tuple[Batcher, AwsPorts]:
    """A batcher on the AWS ports of `found` (this test's stream and table), started."""
    metrics = Metrics()
    ports = aws_ports(settings, metrics, found)
    batcher = Batcher(ports.stream, ports.replies, store, settings, metrics)
    await batcher.start()
    return batcher, ports
