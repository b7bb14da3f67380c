"""AWS clients, and the calls made with them.

Clients are made once per process (per Lambda container), each on its first use (importing
boto3 and botocore's config is a quarter of a second of a cold start, and a Lambda's first
request may need neither client), with short timeouts and no retries of botocore's own:
`AwsCaller` retries what is retryable — throttling and lost connections — with jittered backoff,
counts every call and retry, and runs the blocking boto3 call on a bounded thread pool so that
it never blocks the event loop. botocore's errors never leave this module: they become
AwsUnavailable, AwsRefused or MissingResource. Endpoints come from the environment as boto3
reads it (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_KINESIS, AWS_ENDPOINT_URL_DYNAMODB), so the same
code talks to AWS, LocalStack or moto server.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
)

from infra.backoff import Retries
from infra.errors import (
    AwsRefused,
    AwsUnavailable,
    MissingResource,
    NumeratorError,
    SettingsError,
)
from infra.observe.health import Outcomes
from infra.observe.metrics import Metrics
from infra.settings import Settings

THROTTLED = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "LimitExceededException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
    }
)
TRANSIENT = frozenset({"InternalFailure", "ServiceUnavailable", "InternalServerError"})
MISSING = frozenset({"ResourceNotFoundException"})


REGION = ("AWS_REGION", "AWS_DEFAULT_REGION")


class Clients:
    """One Kinesis and one DynamoDB client, from a session of their own (a session is not safe
    to share between threads that make clients), each made on its first use."""

    def __init__(self, settings: Settings, env: Mapping[str, str]) -> None:
        self.settings, self.env = settings, env
        self._making = threading.Lock()
        self._session: Any = None
        self.kinesis: Any = Lazy(partial(self._client, "kinesis"))
        self.dynamodb: Any = Lazy(partial(self._client, "dynamodb"))

    def _client(self, service: str) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(
            connect_timeout=2,
            read_timeout=10,
            retries={"mode": "standard", "total_max_attempts": 1},  # AwsCaller retries, counts
            max_pool_connections=self.settings.aws.aws_threads,
        )
        with self._making:
            try:
                if self._session is None:
                    self._session = boto3.session.Session(
                        aws_access_key_id=self.env.get("AWS_ACCESS_KEY_ID"),
                        aws_secret_access_key=self.env.get("AWS_SECRET_ACCESS_KEY"),
                        region_name=self.env.get("AWS_DEFAULT_REGION"),
                    )
                endpoint = self.env.get("AWS_ENDPOINT_URL")
                return self._session.client(service, config=config, endpoint_url=endpoint)
            except NoRegionError:
                raise SettingsError("AWS_DEFAULT_REGION", "no AWS region is set") from None


class Lazy:
    """A client made on the first read of one of its attributes (a method, `meta`)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make: Callable[[], Any] | None = make
        self._made: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._make is not None:
            self._made, self._make = self._make(), None
        return getattr(self._made, name)


def clients(settings: Settings, env: Mapping[str, str] | None = None) -> Clients:
    """The clients, made on first use. `env` names the endpoint, region and credentials as
    boto3's variables do (`numerator up --aws moto`); boto3 reads what it lacks from this
    process's environment and configuration. With no region in either environment, the clients
    are made at once, so that a region missing from the configuration too is said here."""
    env = env or {}
    made = Clients(settings, env)
    if not env.get("AWS_DEFAULT_REGION") and not any(os.environ.get(name) for name in REGION):
        _ = made.kinesis.meta, made.dynamodb.meta  # made now, to fail now
    return made


class AwsCaller:
    """Runs boto3 calls off the event loop, retrying throttling and lost connections."""

    def __init__(self, threads: int, metrics: Metrics, attempts: int = 6, cap: float = 1.0):
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="aws")
        self.metrics, self.attempts, self.cap = metrics, attempts, cap
        self.outcomes = Outcomes()
        """How each kind of call last ended, for /healthz."""

    async def __call__(
        self, method: Callable[..., dict[str, Any]], /, tries: int = 0, **kwargs: Any
    ) -> Any:
        """`method(**kwargs)` (boto3's parameters are CamelCase), tried up to `tries` times
        (0: the `attempts` this was made with; 1 for a health check, which must answer now)."""
        name = getattr(method, "__name__", "call")
        try:
            out = await self._tried(name, method, tries or self.attempts, kwargs)
        except NumeratorError as exc:
            self.outcomes.failed(name, str(exc))
            raise
        self.outcomes.worked(name)
        return out

    async def _tried(
        self, name: str, method: Callable[..., dict[str, Any]], tries: int, kwargs: Any
    ) -> Any:
        loop = asyncio.get_running_loop()
        problem = ""
        async for _ in Retries(tries, cap=self.cap):
            self.metrics.aws_calls.inc(name)
            began = time.monotonic()
            try:
                out, cpu = await loop.run_in_executor(self.pool, partial(_timed, method, kwargs))
                self.metrics.aws_cpu_seconds.inc(cpu)  # here: the AWS threads would race
                return out
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                message = exc.response.get("Error", {}).get("Message", "")
                if code in MISSING:
                    raise MissingResource(f"{name}: {message or code}") from exc
                if code not in THROTTLED and code not in TRANSIENT:
                    raise AwsRefused(code, f"{name}: {code}: {message}") from exc
                reason = "throttled" if code in THROTTLED else "transient"
                if code in THROTTLED:
                    self.metrics.aws_throttles.inc(name)
                problem = f"{name}: {code}"
            except (ConnectionError, HTTPClientError) as exc:
                reason, problem = "connection", f"{name}: {exc}"
            except NoCredentialsError as exc:
                raise AwsRefused("NoCredentials", f"{name}: {exc}") from exc
            except BotoCoreError as exc:
                raise AwsRefused(type(exc).__name__, f"{name}: {exc}") from exc
            finally:
                self.metrics.aws_call_seconds.inc(name, time.monotonic() - began)
            self.metrics.aws_retries.inc(reason)
        raise AwsUnavailable(f"{problem} (gave up after {tries} tries)")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _timed(method: Callable[..., dict[str, Any]], kwargs: Any) -> tuple[Any, float]:
    """`method(**kwargs)` in an AWS thread, and the CPU seconds it took there."""
    began = time.thread_time()
    return method(**kwargs), time.thread_time() - began


def create(found: Clients, settings: Settings, wait: float = 60.0) -> list[str]:
    """Create the stream and the reply table named in `settings` if they do not exist, wait until
    both are active, and turn on the table's TTL; what was created. Idempotent. The same
    definition as template.yaml's."""
    try:
        return _create(found, settings, wait)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = error.get("Code", "")
        raise AwsRefused(code, f"cannot create the stream and table: {code}: {error}") from exc
    except BotoCoreError as exc:
        raise AwsUnavailable(f"cannot create the stream and table: {exc}") from exc


def _create(found: Clients, settings: Settings, wait: float) -> list[str]:
    made = []
    try:
        found.kinesis.create_stream(
            StreamName=settings.aws.stream_name, ShardCount=settings.aws.shards
        )
        made.append(f"stream {settings.aws.stream_name} ({settings.aws.shards} shard(s))")
    except found.kinesis.exceptions.ResourceInUseException:
        pass
    try:
        found.dynamodb.create_table(
            TableName=settings.aws.reply_table,
            KeySchema=[
                {"AttributeName": "k", "KeyType": "HASH"},
                {"AttributeName": "f", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "k", "AttributeType": "S"},
                {"AttributeName": "f", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        made.append(f"table {settings.aws.reply_table}")
    except found.dynamodb.exceptions.ResourceInUseException:
        pass
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        stream = found.kinesis.describe_stream_summary(StreamName=settings.aws.stream_name)
        table = found.dynamodb.describe_table(TableName=settings.aws.reply_table)
        if (
            stream["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE"
            and table["Table"]["TableStatus"] == "ACTIVE"
        ):
            break
        time.sleep(0.5)
    ttl = found.dynamodb.describe_time_to_live(TableName=settings.aws.reply_table)
    if ttl["TimeToLiveDescription"].get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        found.dynamodb.update_time_to_live(
            TableName=settings.aws.reply_table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": "x"},
        )
    return made


async def check(found: Clients, calls: AwsCaller, settings: Settings) -> None:
    """Raise MissingResource naming what is missing and how to create it."""
    how = "create both with `numerator aws init` (or deploy template.yaml)"
    try:
        await calls(found.kinesis.describe_stream_summary, StreamName=settings.aws.stream_name)
    except MissingResource:
        raise MissingResource(
            f"no Kinesis stream named {settings.aws.stream_name!r}; {how}"
        ) from None
    try:
        await calls(found.dynamodb.describe_table, TableName=settings.aws.reply_table)
    except MissingResource:
        raise MissingResource(
            f"no DynamoDB table named {settings.aws.reply_table!r}; {how}"
        ) from None
