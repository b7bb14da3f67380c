"""`numerator up --edge lambda`: HTTP served by the real Lambda handler, without a container.

Each HTTP request becomes an API Gateway HTTP API event (payload 2.0) and is handed to
`functions.handler.build()`'s handler in this process, as `sam local start-api` would hand it to a
container. Each thread of a pool is one container — built on its first request (a cold start), one
request at a time, its own event loop, AWS clients and Postgres connection — so the Lambda code
path runs under load on a machine without Docker.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from typing import Any

from starlette.types import Receive, Scope, Send

from functions.handler import LambdaEntry, build
from functions.problems import Kind, Problem
from infra.observe.metrics import Metrics
from infra.observe.workers import Workers, sharing, workers_dir
from infra.run.apigateway import event, read_body
from infra.run.server import worker_signals
from infra.settings import Settings

INVOCATION_TIMEOUT_S = 30.0  # template.yaml's default function timeout


class Context:
    """The part of the Lambda context the app reads, with a deadline like Lambda's."""

    def __init__(self, timeout: float) -> None:
        self.deadline = time.monotonic() + timeout
        self.aws_request_id = str(uuid.uuid4())
        self.function_name = "numerator-edge"
        self.memory_limit_in_mb = 512
        self.invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:numerator-edge"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


class LambdaEdge:
    """An ASGI app whose every HTTP request is one Lambda invocation."""

    def __init__(
        self, containers: int, timeout: float = INVOCATION_TIMEOUT_S, body_timeout: float = 10.0
    ) -> None:
        self.pool = ThreadPoolExecutor(containers, thread_name_prefix="container")
        self.timeout, self.body_timeout = timeout, body_timeout
        self._local = threading.local()
        self.containers: list[Metrics] = []
        self.workers: Workers | None = None
        self._serving = AsyncExitStack()

    def _invoke(self, request: dict[str, Any]) -> dict[str, Any]:
        handler: LambdaEntry | None = getattr(self._local, "handler", None)
        if handler is None:  # this container's cold start
            metrics = self._local.metrics = Metrics()
            self.containers.append(metrics)
            handler = self._local.handler = build(metrics=metrics)
            return handler(request, Context(self.timeout))
        # A warm invocation's CPU: this container's thread and its AWS threads, which serve it
        # alone (the first also loads what the container keeps: Lambda bills it once).
        metrics = self._local.metrics
        began, aws = time.thread_time(), metrics.aws_cpu_seconds.value
        try:
            return handler(request, Context(self.timeout))
        finally:
            spent = time.thread_time() - began + metrics.aws_cpu_seconds.value - aws
            metrics.invocation_cpu_seconds.observe(spent)

    async def _late_body(self, send: Send) -> None:
        detail = f"the body did not arrive within {self.body_timeout:g} s"
        body = Problem(Kind.BODY_TIMEOUT, detail).body()
        headers = [(b"content-type", b"application/problem+json"), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 408, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _total(self) -> Metrics:
        return Metrics.total(self.containers)

    async def _metrics(self, send: Send) -> None:
        """GET /metrics here: every simulated container's metrics added up (in Lambda each
        container has its own, and a scrape would reach one at random), and with `--workers N`
        every worker's containers."""
        metrics = self._total() if self.workers is None else self.workers.total()
        body = metrics.render().encode()
        headers = [(b"content-type", b"text/plain; version=0.0.4")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    worker_signals()
                    directory = workers_dir()
                    if directory is not None:
                        made = sharing(directory, self._total)
                        self.workers = await self._serving.enter_async_context(made)
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await self._serving.aclose()
                    self.pool.shutdown(wait=False, cancel_futures=True)
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        here = self.containers or self.workers is not None
        if scope["method"] == "GET" and scope["path"] == "/metrics" and here:
            await self._metrics(send)
            return
        try:  # API Gateway waits for the body no longer than the other edges do
            async with asyncio.timeout(self.body_timeout):
                body = await read_body(receive)
        except TimeoutError:
            await self._late_body(send)
            return
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self.pool, self._invoke, event(scope, body))
        payload = result.get("body") or ""
        content = base64.b64decode(payload) if result.get("isBase64Encoded") else payload.encode()
        headers = [(k.encode(), str(v).encode()) for k, v in (result.get("headers") or {}).items()]
        for cookie in result.get("cookies") or []:
            headers.append((b"set-cookie", cookie.encode()))
        await send(
            {"type": "http.response.start", "status": result["statusCode"], "headers": headers}
        )
        await send({"type": "http.response.body", "body": content})


def app_from_env() -> LambdaEdge:
    """What a server worker runs for `--edge lambda`."""
    settings = Settings.from_env()
    return LambdaEdge(settings.local.lambda_containers, body_timeout=settings.edge.body_timeout_s)
