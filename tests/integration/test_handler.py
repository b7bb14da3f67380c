"""The Lambda handler (Mangum around the app) fed the API Gateway events in events/ — the files
`sam local invoke` takes — against Kinesis and DynamoDB on a real endpoint, Postgres, and a
batcher running beside it."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from functions.handler import build
from infra.errors import SettingsError
from infra.settings import Settings
from numerator.lambdaedge import Context
from tests.lambdas import EVENTS, Container, batcher_on, body, environment, event, retire
from tests.proxy import silent


def test_every_event_file_through_the_handler(
    batcher: Settings, name: str, containers: list[Container]
) -> None:
    lam = Container(environment(batcher))
    containers.append(lam)
    created = lam(event("http-api-create.json", name))
    assert created["statusCode"] == 201, created
    assert body(created)["template"] == "INV-{yyyy}-{value:06d}"
    one = lam(event("http-api-next.json", name))
    assert one["statusCode"] == 200, one
    year = time.gmtime().tm_year
    assert body(one) == {"counter": name, "value": 1, "formatted": f"INV-{year}-000001"}
    three = lam(event("http-api-next-count.json", name))
    assert [v["value"] for v in body(three)["values"]] == [2, 3, 4]
    retried = lam(event("http-api-next-count.json", name))  # the same Idempotency-Key
    assert body(retried) == body(three)
    bad = lam(event("http-api-next-bad-count.json", name))
    assert bad["statusCode"] == 422
    assert bad["headers"]["content-type"] == "application/problem+json"
    # A problem is text, as JSON is: API Gateway and `sam local invoke` show it as it is
    assert not bad["isBase64Encoded"] and json.loads(bad["body"])["field"] == "count"
    got = lam(event("http-api-get.json", name))
    assert got["statusCode"] == 200 and body(got)["value"] == 4
    rest = lam(event("rest-api-next.json", name))
    assert rest["statusCode"] == 200 and body(rest)["value"] == 5
    rest_count = lam(event("rest-api-next-count.json", name))
    assert [v["value"] for v in body(rest_count)["values"]] == [6, 7]
    url = lam(event("function-url-next.json", name))  # FunctionUrl=true, AWS_IAM: no API Gateway
    assert url["statusCode"] == 200 and body(url)["value"] == 8, url
    encoded = lam(event("http-api-create-base64.json", name))
    assert encoded["statusCode"] == 201 and body(encoded)["name"] == f"{name}-b64"
    missing = lam(event("http-api-next.json", name + "-missing"))
    assert missing["statusCode"] == 404 and not missing["isBase64Encoded"]
    assert body(missing)["type"] == "urn:numerator:problem:counter-not-found"


@pytest.mark.slow  # 3-5 s: the fast lane's budget (docs/testing.md)
def test_numerators_own_keys_in_lambda(
    aws: tuple[Settings, Any], fresh_database: str, name: str, containers: list[Container]
) -> None:
    """The template with Authorizer=NONE: AUTH=keys in the function. Before any key, API
    Gateway's callers (never loopback) get 401; with a key, its scopes decide."""
    from infra.adapters.postgres import PostgresStore
    from infra.keys import new

    settings = aws[0].but(database_url=fresh_database)
    with batcher_on(settings):
        lam = Container({**environment(settings), "AUTH": "keys", "AUTHORIZER": ""})
        containers.append(lam)
        refused = lam(event("http-api-create.json", name))
        assert refused["statusCode"] == 401, refused
        assert refused["headers"]["www-authenticate"].startswith("Bearer")
        assert "numerator keys create" in body(refused)["detail"]

        async def bootstrap() -> tuple[
            str, str
        ]:  # what `numerator keys create --database-url` does
            store = PostgresStore(fresh_database, max_size=1)
            try:
                admin, admin_secret = new("ops", ["admin"], datetime.now(UTC))
                other, other_secret = new("other", ["next:nothing-*"], datetime.now(UTC))
                await store.add_key(admin)
                await store.add_key(other)
            finally:
                await store.close()
            return admin_secret, other_secret

        admin, other = asyncio.run(bootstrap())
        time.sleep(settings.edge.keys_refresh_s + 0.1)  # the container's copy of the keys refreshes

        def signed(file: str, secret: str) -> dict[str, Any]:
            request = event(file, name)
            request["headers"]["authorization"] = f"Bearer {secret}"
            return request

        created = lam(signed("http-api-create.json", admin))
        assert created["statusCode"] == 201, created
        one = lam(signed("http-api-next.json", admin))
        assert one["statusCode"] == 200 and body(one)["value"] == 1
        forbidden = lam(signed("http-api-next.json", other))
        assert forbidden["statusCode"] == 403 and "forbidden" in body(forbidden)["type"]
        assert lam(event("http-api-next.json", name))["statusCode"] == 401


def test_auth_none_in_lambda_needs_an_authorizer(aws: tuple[Settings, Any]) -> None:
    env = {**environment(aws[0]), "AUTH": "none", "AUTHORIZER": ""}
    with pytest.raises(SettingsError, match="AUTHORIZER"):
        build(env)


def test_a_request_is_answered_504_before_lambda_times_out(
    aws: tuple[Settings, Any], containers: list[Container]
) -> None:
    settings, _ = aws  # no batcher runs: no reply will come
    lam = Container(environment(settings))
    containers.append(lam)
    began = time.monotonic()
    answer = lam(event("http-api-next.json", "no-batcher"), timeout=1.2)
    took = time.monotonic() - began
    assert answer["statusCode"] == 504, answer
    assert took < 1.2, f"answered after {took:.2f}s, past the invocation's 1.2s"


def test_a_put_to_a_stream_that_never_answers_is_a_504_before_lambda_times_out(
    aws: tuple[Settings, Any], containers: list[Container], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Kinesis endpoint that takes the connection and never answers: the record's put is held
    to the invocation's time as its reply's wait is, so the client gets a 504 problem, not the
    invocation's own end (API Gateway's 502), and the record is given up after its put."""
    with silent() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)  # what boto3 reads as Lambda's would
        lam = Container(environment(aws[0]))
        containers.append(lam)
        began = time.monotonic()
        answer = lam(event("http-api-next.json", "hung-stream"), timeout=2.0)
        took = time.monotonic() - began
    assert answer["statusCode"] == 504, answer
    assert body(answer)["type"] == "urn:numerator:problem:reply-timeout", body(answer)
    assert took < 2.0, f"answered after {took:.2f}s, past the invocation's 2s"


def test_counter_crud_without_a_database_is_a_clear_503(
    aws: tuple[Settings, Any], containers: list[Container]
) -> None:
    settings, _ = aws
    lam = Container(environment(settings.but(database_url="")))
    containers.append(lam)
    answer = lam(event("http-api-get.json", "x"))
    assert answer["statusCode"] == 503
    assert "DATABASE_URL" in body(answer)["detail"]


def test_the_database_url_is_read_from_a_secret_on_first_use(
    batcher: Settings, name: str, containers: list[Container]
) -> None:
    """DATABASE_SECRET_ARN (the template's): the secret, in RDS's JSON shape, read by the first
    request that needs Postgres; a secret that cannot be read is a clear 503."""
    from urllib.parse import parse_qs, urlsplit

    import boto3

    parts = urlsplit(batcher.database.database_url)
    query = parse_qs(parts.query)  # the embedded Postgres listens on a Unix socket
    value = {
        "username": parts.username,
        "password": parts.password or "",
        "host": parts.hostname or query["host"][0],
        "port": parts.port or int(query.get("port", ["5432"])[0]),
        "dbname": parts.path.lstrip("/"),
        "engine": "postgres",
    }
    secrets = boto3.session.Session().client("secretsmanager")
    arn = secrets.create_secret(Name=f"db-{name}", SecretString=json.dumps(value))["ARN"]
    lam = Container(environment(batcher.but(database_url="", database_secret_arn=arn)))
    containers.append(lam)
    created = lam(event("http-api-create.json", name))
    assert created["statusCode"] == 201, created
    one = lam(event("http-api-next.json", name))
    assert one["statusCode"] == 200 and body(one)["value"] == 1
    secrets.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
    unknown = Container(
        environment(batcher.but(database_url="", database_secret_arn=arn + "-gone"))
    )
    containers.append(unknown)
    refused = unknown(event("http-api-get.json", name))
    assert refused["statusCode"] == 503
    assert "cannot read the database secret" in body(refused)["detail"]


def entry_point(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Any:
    """`functions.handler` as Lambda's Python runtime leaves it for template.yaml's LoggingConfig:
    a fresh container, `env` its environment, the root logger at INFO (ApplicationLogLevel)."""
    import functions.handler as entry

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(entry, "_container", None)
    for log_handler in entry.logger._logger.handlers:  # bound to stdout when first imported
        monkeypatch.setattr(log_handler, "stream", sys.stdout)
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", logging.INFO)
    return entry


def retired(entry: Any, thread: ThreadPoolExecutor) -> None:
    assert entry._container is not None
    thread.submit(retire, entry._container[0]).result()
    thread.shutdown()


def test_the_entry_point_logs_nothing_for_a_request_that_works_and_emf_once_an_interval(
    batcher: Settings,
    name: str,
    containers: list[Container],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`functions.handler.handler` as Lambda calls it: the container's start is one JSON line
    with the request id; then requests that work (and a client's 404) write nothing, Mangum's
    access line included, until the container's EMF interval passes: one line, the sums."""
    from functions import requestlog
    from infra.adapters import dynamodb

    entry = entry_point(monkeypatch, {**environment(batcher), "EMF_INTERVAL_S": "60"})
    # A container's first answer builds its AWS clients: on a loaded machine it passed SLOW_S (a
    # slow answer has its line: tests/unit/test_request_log.py); these are about working ones.
    monkeypatch.setattr(requestlog, "SLOW_S", 30.0)
    # A reply may take more than OVERDUE_S there too (CI: the first answer's): after another
    # shard's timely reply, the container then says it puts on the other shards for a while
    # (tests/e2e/test_frozen.py), a line of its own; these are about requests that work.
    monkeypatch.setattr(dynamodb, "OVERDUE_S", 30.0)
    setup = Container(environment(batcher))
    containers.append(setup)
    assert setup(event("http-api-create.json", name))["statusCode"] == 201
    thread = ThreadPoolExecutor(1)
    context = Context(30)
    capsys.readouterr()
    first = thread.submit(entry.handler, event("http-api-next.json", name), context).result()
    started = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    caplog.clear()
    answers = [
        thread.submit(entry.handler, event(file, name), Context(30)).result()["statusCode"]
        for file in ("http-api-next.json", "http-api-next-count.json", "http-api-next.json")
    ]
    missing = event("http-api-next.json", name + "-none")
    absent = thread.submit(entry.handler, missing, Context(30)).result()
    quiet = capsys.readouterr()
    records = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert entry._container is not None
    emf = entry._container[1]
    later = emf.flushed_at + 60
    written = thread.submit(emf.tick, later).result()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    retired(entry, thread)
    assert (first["statusCode"], answers, absent["statusCode"]) == (200, [200, 200, 200], 404)
    assert [line["message"] for line in started] == ["container started"]
    assert started[0]["function_request_id"] == context.aws_request_id
    assert started[0]["service"] == "numerator" and started[0]["level"] == "INFO"
    assert (quiet.out, quiet.err, records) == ("", "", [])
    assert written["Requests"] == 5.0 and written["RecordsPut"] == 5.0
    [line] = lines
    assert line["role"] == "lambda" and line["service"] == "numerator"
    assert line["Requests"] == [5.0] and "ReplyTimeouts" not in line
    assert line["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "numerator"


def test_the_entry_point_logs_a_reply_timeout_once_with_the_request_id_and_its_metrics_at_once(
    aws: tuple[Settings, Any],
    fresh_database: str,
    name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A /next that no batcher answers (none runs) is answered 504 as its invocation's time runs
    out: one error line, with the invocation's request id, and the container's EMF line at once
    (the alarms count server errors)."""
    settings = aws[0].but(database_url=fresh_database)
    entry = entry_point(monkeypatch, environment(settings))
    thread = ThreadPoolExecutor(1)
    context = Context(1.5)
    capsys.readouterr()
    failed = thread.submit(entry.handler, event("http-api-next.json", name), context).result()
    retired(entry, thread)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert failed["statusCode"] == 504, failed
    logs = [line for line in lines if "_aws" not in line and line["level"] != "INFO"]
    assert len(logs) == 1, logs
    assert logs[0]["level"] == "ERROR" and logs[0]["function_request_id"] == context.aws_request_id
    assert logs[0]["message"].startswith("POST /counters/")
    assert "answered 504 in" in logs[0]["message"] and context.aws_request_id in logs[0]["message"]
    [emf] = [line for line in lines if "_aws" in line]
    assert emf["ServerErrors"] == [1.0] and emf["ReplyTimeouts"] == [1.0]


@pytest.mark.parametrize("auth", ["keys", "none"])
def test_the_lambda_edge_refuses_a_web_page_acting_for_a_loopback_caller(
    aws: tuple[Settings, Any],
    fresh_database: str,
    name: str,
    containers: list[Container],
    auth: str,
) -> None:
    """The cross-site checks through Mangum, where they apply: a caller that API Gateway (or
    `up --edge lambda`) names as loopback is trusted only with a loopback Host and its own
    Origin, before the first key (AUTH=keys) or with nothing in front (AUTH=none)."""
    settings = aws[0].but(database_url=fresh_database)
    env = {**environment(settings), "AUTH": auth, "AUTHORIZER": ""}
    if auth == "none":
        env["AUTHORIZER"] = "loopback only (127.0.0.1)"  # what `up --edge lambda` names
    lam = Container(env)
    containers.append(lam)

    def local(**headers: str) -> dict[str, Any]:
        request = event("http-api-create.json", name)
        request["requestContext"]["http"]["sourceIp"] = "127.0.0.1"
        request["headers"]["x-forwarded-proto"] = "http"  # as sam local start-api says it
        request["headers"].update(headers)
        return request

    rebound = lam(local(host="attacker.example:3000"))
    assert rebound["statusCode"] == 403 and "Host" in body(rebound)["detail"], rebound
    form = lam(local(host="127.0.0.1:3000", origin="http://attacker.example"))
    assert form["statusCode"] == 403 and "Origin" in body(form)["detail"], form
    scheme = lam(local(host="127.0.0.1:3000", origin="https://127.0.0.1:3000"))
    assert scheme["statusCode"] == 403 and "Origin" in body(scheme)["detail"], scheme
    own = lam(local(host="127.0.0.1:3000", origin="http://127.0.0.1:3000"))
    assert own["statusCode"] == 201, own


def test_numerator_invoke_sends_event_files_through_the_handler_in_one_container(
    batcher: Settings, name: str, tmp_path: Path
) -> None:
    """The documented command (`numerator invoke EVENT…`), as a user runs it: a child process,
    the function's environment its own, one answer per event, in order."""
    files = []
    for file in ("http-api-create.json", "http-api-next.json", "http-api-next-count.json"):
        files.append(tmp_path / file)
        files[-1].write_text(json.dumps(event(file, name)))
    done = subprocess.run(
        [sys.executable, "-m", "numerator", "invoke", *map(str, files)],
        env={**os.environ, **environment(batcher)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a["statusCode"] for a in answers] == [201, 200, 200], answers
    assert [v["value"] for v in body(answers[2])["values"]] == [2, 3, 4]


def test_numerator_invoke_says_what_is_wrong_with_its_input(tmp_path: Path) -> None:
    (tmp_path / "not.json").write_text("{")
    (tmp_path / "other.json").write_text('{"Records": []}')
    for args, said in [
        (["missing.json"], "cannot read the event missing.json"),
        ([str(tmp_path / "not.json")], "is not JSON"),
        ([str(tmp_path / "other.json")], "is not an API Gateway event"),
        (["--build", str(tmp_path), str(EVENTS / "http-api-next.json")], "no functions/handler.py"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "numerator", "invoke", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1 and said in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


@pytest.mark.slow  # 30 requests one after another, a beat (200 ms) each: 7 s
def test_a_lambda_container_reads_its_reply_about_once_a_request(
    aws: tuple[Settings, Any], name: str, containers: list[Container]
) -> None:
    """The batcher reads the stream on the beats of READ_INTERVAL_MS, so a container reads its
    reply once, a lag after the beat that reads its record, where polling from the put read it
    about 1.5 times: counted over 30 requests one after another, at the interval AWS allows
    (200 ms). REPLY_LAG_MS is 100 here (40 by default, which `numerator bench` measures), for a
    busy machine's calls: this tests the beats."""
    settings = aws[0].but(read_interval_ms=200.0, back_frame_ms=10.0, reply_lag_ms=100.0)
    with batcher_on(settings):
        lam = Container(environment(settings))
        containers.append(lam)
        assert lam(event("http-api-create.json", name))["statusCode"] == 201
        assert lam(event("http-api-next.json", name))["statusCode"] == 200  # warm
        read = lam.handler.app.edge.metrics.reply_items.values
        before = read["read"]
        for _ in range(30):
            assert lam(event("http-api-next.json", name))["statusCode"] == 200
        assert read["read"] - before <= 1.1 * 30, read["read"] - before


def test_the_local_lambda_edge_times_each_warm_invocations_cpu(
    batcher: Settings, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`numerator up --edge lambda` counts the CPU of each invocation after a container's
    first (its thread's, and its AWS calls' in their threads), which `numerator plan` bills at
    a Lambda's share of a vCPU. The first builds what the container keeps, as a cold start."""
    from numerator.lambdaedge import LambdaEdge

    for key, value in environment(batcher).items():
        monkeypatch.setenv(key, value)
    edge = LambdaEdge(1)
    thread = ThreadPoolExecutor(1)  # the container's thread: its handler and loop live there
    try:
        invoke = edge._invoke
        created = thread.submit(invoke, event("http-api-create.json", name)).result()
        assert created["statusCode"] == 201, created
        for _ in range(3):
            one = thread.submit(invoke, event("http-api-next.json", name)).result()
            assert one["statusCode"] == 200, one
        [metrics] = edge.containers
        timed = metrics.invocation_cpu_seconds
        assert timed.count == 3, timed.count  # the three /next, not the cold start
        assert 0 < timed.sum < 3 * 0.5, timed.sum  # CPU, not the waits (each about 0.2 s)
        assert metrics.aws_cpu_seconds.value > 0
        assert metrics.aws_calls.values["put_record"] == 3
    finally:
        thread.submit(lambda: retire(edge._local.handler)).result()
        thread.shutdown()


@pytest.mark.parametrize("host", ["[::1]:3000", "127.0.0.1:http", "a:1:2"])
def test_a_host_mangum_cannot_read_is_a_400_problem(
    aws: tuple[Settings, Any], name: str, containers: list[Container], host: str
) -> None:
    """Issue 51, item 7: Mangum split such a Host at its colons and answered a plain-text 500."""
    lam = Container(environment(aws[0]))
    containers.append(lam)
    asked = event("http-api-next.json", name)
    asked["headers"]["host"] = host
    answer = lam(asked)
    assert answer["statusCode"] == 400, answer
    assert answer["headers"]["content-type"] == "application/problem+json"
    problem = body(answer)
    assert problem["type"] == "urn:numerator:problem:bad-host" and host in problem["detail"]
    fine = event("http-api-create.json", name)
    fine["headers"]["host"] = "127.0.0.1:3000"
    assert lam(fine)["statusCode"] == 201, "a host and numeric port is served"


async def test_the_local_lambda_edge_answers_a_body_that_never_ends_408() -> None:
    """Issue 51, item 7: `up --edge lambda` waited 40 s for a body that never completed; the other
    edges answer 408 at BODY_TIMEOUT_S. No container is invoked for it."""
    from numerator.lambdaedge import LambdaEdge

    edge = LambdaEdge(1, body_timeout=0.3)
    sent: list[dict[str, Any]] = []
    parts = [{"type": "http.request", "body": b'{"name":', "more_body": True}]

    async def receive() -> dict[str, Any]:
        if parts:
            return parts.pop()
        await asyncio.sleep(3600)  # the rest never comes
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/counters", "headers": []}
    began = time.monotonic()
    await edge(scope, receive, send)
    assert time.monotonic() - began < 3
    assert sent[0]["status"] == 408 and not edge.containers
    assert json.loads(sent[1]["body"])["type"] == "urn:numerator:problem:body-timeout"
    edge.pool.shutdown()


def test_a_container_keeps_no_postgres_connection_between_invocations(
    batcher: Settings, name: str, containers: list[Container]
) -> None:
    """A Lambda container is frozen between invocations with whatever it holds: the counter
    routes open a connection each and close it (docs/architecture.md, "Connections"), so a
    fleet of idle containers holds none of the instance's max_connections."""
    import psycopg

    url = batcher.database.database_url
    tagged = url + ("&" if "?" in url else "?") + "application_name=lambda-container"
    lam = Container({**environment(batcher), "DATABASE_URL": tagged})
    containers.append(lam)
    assert lam(event("http-api-create.json", name))["statusCode"] == 201
    assert lam(event("http-api-get.json", name))["statusCode"] == 200
    with psycopg.connect(url, autocommit=True) as conn:
        held = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lambda-container'"
        ).fetchone()
    assert held == (0,)
