"""Shared fixtures: a real Postgres (embedded unless DATABASE_URL is set), a stack wired to it,
an HTTP client over ASGI, a clock the tests can move, and unique counter names."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from infra.adapters.postgres import PostgresStore, migrate
from infra.settings import Settings
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client


class Clock:
    """A clock the tests move by hand; the batcher's periods follow it."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture(autouse=True)
def keys_of_their_own_shape() -> Iterator[None]:
    """An in-process server edge reads its replies a frame at a time (REPLY_ITEMS=frame) and so
    makes grouped reply keys from then on (infra/wire.py `read_grouped`, process-wide, as its
    worker processes are): each test starts with the keys a Lambda container makes."""
    import infra.wire

    yield
    if infra.wire._GROUPED:
        infra.wire._GROUPED = False
        infra.wire._draw()


@pytest.fixture(autouse=True)
def a_fresh_log_budget() -> None:
    """The edge logs failed requests ten a second at most (functions/requestlog.py): each test
    starts with the second's budget whole, whatever the test before it logged."""
    from functions import requestlog

    requestlog.budget = requestlog.LineBudget()


@pytest.fixture(scope="session", autouse=True)
def nothing_left_running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The run fails if it leaves a process running (tests/leftovers.py), which is stopped."""
    from tests.leftovers import describe, left_behind, stop

    yield
    left = left_behind(tmp_path_factory.getbasetemp(), os.getpid())
    said = "; ".join(describe(p) for p in left)
    stop(left)
    assert not left, "left running by the tests (now stopped): " + said


@contextmanager
def temporary_pgserver() -> Iterator[Any]:
    """An embedded Postgres server (the pgserver object) in a folder deleted afterwards."""
    import pgserver

    folder = Path(tempfile.mkdtemp(prefix="numerator-test-"))
    server = pgserver.get_server(folder / "pgdata", cleanup_mode="stop")
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[object | None]:
    """The embedded server when DATABASE_URL is not set (None otherwise)."""
    if os.environ.get("DATABASE_URL"):
        yield None
        return
    with temporary_pgserver() as server:
        yield server


@pytest.fixture(scope="session")
def database_url(pg_server: object | None) -> str:
    url = os.environ.get("DATABASE_URL") or pg_server.get_uri()  # type: ignore[union-attr]
    asyncio.run(migrate(url))
    return str(url)


@pytest.fixture
def fresh_database(database_url: str) -> Iterator[str]:
    """A database of this test's own on the same server, migrated, dropped afterwards: for
    tests that create API keys, which would close every other test's loopback access."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(database_url)
    url = urlunsplit(parts._replace(path="/" + name))
    asyncio.run(migrate(url))
    yield url
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings.of().but(database_url=database_url, back_frame_ms=2.0, reply_timeout_s=5.0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def stack(settings: Settings, clock: Clock) -> AsyncIterator[EmbeddedStack]:
    async with EmbeddedStack(settings, clock) as running:
        yield running


@pytest.fixture
async def client(stack: EmbeddedStack) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(stack.app()) as http:
        yield http


@pytest.fixture
def name() -> str:
    """A counter name no other test uses: tests share one database."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def aws_endpoint() -> Iterator[str]:
    """A real AWS API endpoint: AWS_ENDPOINT_URL (LocalStack), else moto server on loopback."""
    from tests.aws import endpoint

    with endpoint() as url:
        yield url


@pytest.fixture
def aws(aws_endpoint: str, settings: Settings) -> Iterator[tuple[Settings, Any]]:
    """Settings for the AWS path with a stream and a table of this test's own, and the clients."""
    from tests.aws import resources

    fast = settings.but(read_interval_ms=20.0)  # moto has no per-shard read limit
    with resources(fast) as made:
        yield made


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(database_url)
    await store.open()
    yield store
    await store.close()


@pytest.fixture(scope="session")
def localstack_endpoint() -> Iterator[str]:
    """LocalStack in host mode, serving Kinesis (tests/localstack.py)."""
    from tests.localstack import localstack

    with localstack() as url:
        yield url


@pytest.fixture
def localstack_kinesis(
    aws_endpoint: str, localstack_endpoint: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Settings, Any]]:
    """Like `aws`, with Kinesis on LocalStack and DynamoDB on moto (LocalStack's needs Java)."""
    from tests.aws import resources

    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", localstack_endpoint)
    fast = settings.but(read_interval_ms=20.0)
    with resources(fast) as made:
        yield made
