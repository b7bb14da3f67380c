"""The Replies port on Amazon DynamoDB (boto3, through `AwsCaller`).

The batcher writes one item per reply — key `k`, the encoded reply `r`, and `x`, the Unix time the
table's TTL removes it at — with BatchWriteItem, 25 a call, retrying UnprocessedItems with backoff.

The edge awaits its key with strongly consistent reads. ONE poller per process (per event loop)
reads every outstanding key together with BatchGetItem, 100 keys a call, not one loop per request:
a key is first read when its reply is expected (about one shard read and one frame after the put)
and then at growing intervals, until the request's deadline, then ReplyTimeout (504). The poller
wakes once a tick, so that the keys that fall due within it share one call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.adapters.aws import AwsCaller
from infra.backoff import Retries
from infra.errors import AwsRefused, AwsUnavailable, NumeratorError, ReplyTimeout
from infra.observe.metrics import Metrics
from infra.wire import BadReply, Reply, decode_reply, encode

log = logging.getLogger("numerator.replies")

WRITE_BATCH, READ_BATCH = 25, 100
WRITE_ATTEMPTS = 8
FIRST_STEP, GROWTH, LONGEST_STEP = 0.025, 1.5, 0.25
WARN_EVERY_S = 5.0
TICK_S = 0.02  # the poller reads at most once a tick: keys due within one tick share a call


@dataclass
class _Wait:
    future: asyncio.Future[Reply]
    due: float  # monotonic time of its next read
    step: float = FIRST_STEP


@dataclass
class _Poller:
    waits: dict[str, _Wait] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


class DynamoReplies:
    def __init__(
        self,
        client: Any,
        calls: AwsCaller,
        table: str,
        metrics: Metrics,
        ttl: float = 3600,
        expected: float = 0.2,
    ) -> None:
        """`expected`: seconds from the put to when its reply is first looked for."""
        self.client, self.calls, self.table, self.metrics = client, calls, table, metrics
        self.ttl, self.expected = ttl, expected
        self._poller = _Poller()
        self._warned, self._failed = -WARN_EVERY_S, 0

    async def ping(self) -> None:
        """Describe the reply table (for /healthz): AwsUnavailable, or MissingResource, if it
        does not answer."""
        await self.calls(self.client.describe_table, tries=1, TableName=self.table)

    def expect(self, key: str) -> None:
        loop = asyncio.get_running_loop()
        self._poller.waits[key] = _Wait(loop.create_future(), time.monotonic() + self.expected)

    def forget(self, key: str) -> None:
        self._poller.waits.pop(key, None)

    async def publish(self, replies: Sequence[Reply]) -> None:
        expires = str(int(time.time() + self.ttl))
        requests = [
            {
                "PutRequest": {
                    "Item": {"k": {"S": r.key}, "r": {"S": encode(r).decode()}, "x": {"N": expires}}
                }
            }
            for r in replies
        ]
        chunks = [requests[i : i + WRITE_BATCH] for i in range(0, len(requests), WRITE_BATCH)]
        results = await asyncio.gather(*(self._write(c) for c in chunks), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _write(self, requests: list[dict[str, Any]]) -> None:
        async for _ in Retries(WRITE_ATTEMPTS, cap=1.0):
            out = await self.calls(
                self.client.batch_write_item, RequestItems={self.table: requests}
            )
            requests = out.get("UnprocessedItems", {}).get(self.table, [])
            if not requests:
                return
            self.metrics.aws_retries.inc("unprocessed", len(requests))
        raise AwsUnavailable(f"DynamoDB left {len(requests)} replies unwritten")

    async def wait(self, key: str, timeout: float) -> Reply:
        poller = self._poller
        if key not in poller.waits:
            self.expect(key)
        waiting = poller.waits[key]
        if poller.task is None or poller.task.done():
            poller.task = asyncio.get_running_loop().create_task(self._poll())
        try:
            # Not asyncio.wait_for: it returns a reply that came as the wait was cancelled (its
            # client gone), swallowing the cancel, so that no one gave those values up.
            async with asyncio.timeout(timeout):
                return await asyncio.shield(waiting.future)
        except TimeoutError:
            raise ReplyTimeout(f"no reply within {timeout:g}s") from None
        finally:
            poller.waits.pop(key, None)

    async def _poll(self) -> None:
        waits = self._poller.waits
        while waits:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            due = [k for k, w in waits.items() if w.due <= now and not w.future.done()]
            if not due:
                continue
            for key in due:
                wait = waits[key]
                wait.step = min(wait.step * GROWTH, LONGEST_STEP)
                wait.due = now + wait.step
            chunks = [due[i : i + READ_BATCH] for i in range(0, len(due), READ_BATCH)]
            await asyncio.gather(*(self._read(chunk) for chunk in chunks))

    def _warn(self, exc: NumeratorError) -> None:
        """Say a read failed, once every WARN_EVERY_S at most: a refusing table fails every
        tick, and a line each flooded the log."""
        now = time.monotonic()
        self._failed += 1
        if now - self._warned >= WARN_EVERY_S:
            log.warning("cannot read replies (%d failed reads): %s", self._failed, exc)
            self._warned, self._failed = now, 0

    async def _read(self, keys: list[str]) -> None:
        try:
            out = await self.calls(
                self.client.batch_get_item,
                RequestItems={
                    self.table: {
                        "Keys": [{"k": {"S": k}} for k in keys],
                        "ConsistentRead": True,
                        "ProjectionExpression": "k, r",
                    }
                },
            )
        except AwsRefused as exc:  # read again, it is refused again: its waiters are told now
            self._warn(exc)
            for key in keys:
                wait = self._poller.waits.get(key)
                if wait is not None and not wait.future.done():
                    wait.future.set_exception(exc)
            return
        except NumeratorError as exc:  # the keys are read again at their next step
            self._warn(exc)
            return
        waits = self._poller.waits
        for item in out.get("Responses", {}).get(self.table, []):
            wait = waits.get(item["k"]["S"])
            if wait is None or wait.future.done():
                continue
            try:
                wait.future.set_result(decode_reply(item["r"]["S"].encode()))
            except (BadReply, KeyError) as exc:
                wait.future.set_exception(BadReply(f"unreadable reply item: {exc}"))
