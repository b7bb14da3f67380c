"""The serverless counter a user would write instead of numerator: a Lambda-style handler that
takes each number with one DynamoDB `UpdateItem … ADD` (the atomic counter of DynamoDB's
developer guide). `numerator bench --aws … --compare` runs it beside numerator on the same
endpoint (moto server, or LocalStack), under the same load.

What it cannot promise, and numerator does: a retried request (a client timeout, a Lambda retry)
takes a second number, since ADD is not idempotent; a timeout after the write leaves a gap nobody
can explain; there is no per-period reset, template or range contiguity across counters; and all
of one counter's writes land on one item, so one partition: 1,000 writes a second at most.

Each HTTP request becomes a payload-2.0 event handed to `handler` in a pool of threads (one per
simulated container, ATOMIC_CONTAINERS), as the Lambda edge's local runner does for numerator.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from infra.counters import NAME
from infra.run import apigateway

TABLE = "numerator-baseline-atomic"


class CallTally:
    """The AWS calls the handler made, by call, as numerator's metrics name them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.made: dict[str, int] = {}
        self.requests = 0
        self.cpu, self.invocations = 0.0, 0  # warm invocations' CPU seconds, and how many

    def add(self, call: str) -> None:
        with self.lock:
            self.made[call] = self.made.get(call, 0) + 1

    def spent(self, seconds: float) -> None:
        with self.lock:
            self.cpu += seconds
            self.invocations += 1

    def render(self) -> str:
        lines = [
            "# TYPE baseline_requests_total counter",
            f"baseline_requests_total {self.requests}",
            "# TYPE baseline_transactions_total counter",
            f"baseline_transactions_total {self.made.get('update_item', 0)}",
            "# TYPE numerator_aws_calls_total counter",
        ]
        lines += [f'numerator_aws_calls_total{{call="{c}"}} {n}' for c, n in self.made.items()]
        lines += [
            "# TYPE numerator_invocation_cpu_seconds summary",
            f"numerator_invocation_cpu_seconds_sum {self.cpu}",
            f"numerator_invocation_cpu_seconds_count {self.invocations}",
        ]
        return "\n".join(lines) + "\n"


TALLY = CallTally()
_client: Any = None
_warm = threading.local()  # a container (a thread of the pool) that has been invoked


def invoke(event: dict[str, Any]) -> dict[str, Any]:
    """`handler`, a warm invocation's CPU counted as numerator's Lambda edge counts its own
    (the first of a container makes what it keeps, as a cold start does)."""
    if not getattr(_warm, "done", False):
        _warm.done = True
        return handler(event)
    began = time.thread_time()
    try:
        return handler(event)
    finally:
        TALLY.spent(time.thread_time() - began)


def client() -> Any:
    """The handler's DynamoDB client, made once per process as a Lambda's module scope would."""
    global _client
    if _client is None:
        import boto3
        from botocore.config import Config

        _client = boto3.client(
            "dynamodb",
            endpoint_url=os.environ.get("ATOMIC_ENDPOINT") or None,
            config=Config(max_pool_connections=containers()),
        )
    return _client


def containers() -> int:
    return int(os.environ.get("ATOMIC_CONTAINERS", "32"))


def respond(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json"},
        "body": orjson.dumps(body).decode(),
    }


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """POST /counters {"name": …} and POST /counters/{name}/next[?count=N], the atomic way."""
    method = event["requestContext"]["http"]["method"]
    parts = event["rawPath"].strip("/").split("/")
    table = os.environ.get("ATOMIC_TABLE", TABLE)
    if method == "POST" and parts == ["counters"]:
        raw = event.get("body") or "{}"
        body = orjson.loads(base64.b64decode(raw) if event.get("isBase64Encoded") else raw)
        name = body.get("name") if isinstance(body, dict) else None
        if not isinstance(name, str) or not NAME.fullmatch(name):
            return respond(422, {"detail": "bad name"})
        errors = client().exceptions
        try:
            TALLY.add("put_item")
            client().put_item(
                TableName=table,
                Item={"name": {"S": name}, "v": {"N": "0"}},
                ConditionExpression="attribute_not_exists(#n)",
                ExpressionAttributeNames={"#n": "name"},
            )
        except errors.ConditionalCheckFailedException:
            return respond(409, {"detail": "exists"})
        return respond(201, {"name": name})
    if method == "POST" and len(parts) == 3 and parts[0] == "counters" and parts[2] == "next":
        return take(table, parts[1], event)
    return respond(404, {"detail": "no such route"})


def take(table: str, name: str, event: dict[str, Any]) -> dict[str, Any]:
    query = event.get("queryStringParameters") or {}
    count = int(query.get("count", "1")) if str(query.get("count", "1")).isdigit() else 0
    if not NAME.fullmatch(name) or not 1 <= count <= 1000:
        return respond(422, {"detail": "bad name or count"})
    errors = client().exceptions
    try:
        TALLY.add("update_item")
        done = client().update_item(
            TableName=table,
            Key={"name": {"S": name}},
            UpdateExpression="ADD v :n",
            ConditionExpression="attribute_exists(#n)",
            ExpressionAttributeNames={"#n": "name"},
            ExpressionAttributeValues={":n": {"N": str(count)}},
            ReturnValues="UPDATED_NEW",
        )
    except errors.ConditionalCheckFailedException:
        return respond(404, {"detail": f"no counter named {name!r}"})
    last = int(done["Attributes"]["v"]["N"])
    if count == 1:
        return respond(200, {"counter": name, "value": last, "formatted": str(last)})
    return respond(200, {"counter": name, "first": last - count + 1, "last": last})


def make_table(table: str) -> None:
    with contextlib.suppress(client().exceptions.ResourceInUseException):
        client().create_table(
            TableName=table,
            AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
    for _ in range(100):
        state = client().describe_table(TableName=table)["Table"]["TableStatus"]
        if state == "ACTIVE":
            return
        time.sleep(0.1)


class Containers:
    """An ASGI app whose every request is one invocation of `handler` in a pool of threads;
    /healthz and /metrics answered here."""

    def __init__(self, containers: int) -> None:
        self.pool = ThreadPoolExecutor(containers, thread_name_prefix="container")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await receive()  # lifespan.startup
            make_table(os.environ.get("ATOMIC_TABLE", TABLE))
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            self.pool.shutdown(wait=False, cancel_futures=True)
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = await apigateway.read_body(receive)
        if scope["path"] == "/metrics":
            result: dict[str, Any] = {"statusCode": 200, "body": TALLY.render(), "headers": {}}
        elif scope["path"] in ("/healthz", "/ping"):
            result = respond(200, {"status": "ok", "baseline": "atomic"})
        else:
            if scope["path"].endswith("/next"):
                TALLY.requests += 1
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self.pool, invoke, apigateway.event(scope, body))
        headers = [(k.encode(), str(v).encode()) for k, v in result["headers"].items()]
        start = {"type": "http.response.start", "status": result["statusCode"]}
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": result["body"].encode()})


def app_from_env() -> Containers:
    """The granian factory: ATOMIC_ENDPOINT, ATOMIC_TABLE, ATOMIC_CONTAINERS from the env."""
    return Containers(containers())


def main() -> None:
    import argparse

    from infra.run.server import serve

    parser = argparse.ArgumentParser(description="serve the atomic-counter baseline")
    parser.add_argument("--endpoint", default="", help="DynamoDB's endpoint (empty: AWS)")
    parser.add_argument("--table", default=TABLE, help="the table of counters (made if absent)")
    parser.add_argument("--containers", type=int, default=32, help="concurrent invocations")
    parser.add_argument("--host", default="127.0.0.1", help="where to listen")
    parser.add_argument("--port", type=int, default=8082, help="the port to listen on")
    args = parser.parse_args()
    env = {
        "ATOMIC_ENDPOINT": args.endpoint,
        "ATOMIC_TABLE": args.table,
        "ATOMIC_CONTAINERS": str(args.containers),
    }
    serve("bench.atomic:app_from_env", args.host, args.port, 1, env=env)


if __name__ == "__main__":
    main()
