"""The Lambda entry point: the Starlette app wrapped by Mangum, built once per container.

`/next` puts a record on Kinesis and awaits its reply in DynamoDB; it never touches Postgres (the
batcher tells an unknown counter apart). Counter CRUD and the API keys' reloads each open a
Postgres connection and close it when done, and answer 503 when they cannot: a container keeps
none while it is frozen between invocations (docs/architecture.md, "Connections").

Logs are Powertools' structured JSON with the invocation's request id, the app's own loggers
included. A request that works writes no line (Mangum's access line at INFO is off); a server
error or a slow answer writes one (functions/requestlog.py). Metrics go out as a CloudWatch EMF
line a container an interval, EMF_INTERVAL_S (LAMBDA_EMF_S when it is 0), not one an invocation
(infra/observe/emf.py): Lambda gives a function no hook as it retires a container, so the counts
of a container's last interval are lost unless it held a server error or a throttle, which are
written at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from mangum import Mangum
from mangum.adapter import DEFAULT_TEXT_MIME_TYPES

from functions.app import create_app
from functions.edge import CANCEL_PUT_S, Edge
from functions.problems import Kind, Problem
from infra.adapters.serverless import aws_ports
from infra.errors import SettingsError
from infra.observe import traces
from infra.observe.emf import Emf
from infra.observe.health import Health
from infra.observe.metrics import Metrics
from infra.ports import EdgeStore
from infra.settings import Settings

# Bodies sent as they are, not base64: Mangum's text types and the problems' (RFC 9457), so that
# `sam local invoke` and API Gateway's logs show an error's reason.
TEXT = [*DEFAULT_TEXT_MIME_TYPES, "application/problem+json"]


class LazyStore:
    """The Postgres store, made on first use: /next never touches Postgres, and importing psycopg
    is a large share of a cold start's imports (docs/performance.md, measured with -X
    importtime)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.made: Any = None

    def __getattr__(self, name: str) -> Any:
        if self.made is None:
            from infra.adapters.postgres import PostgresStore

            settings = self.settings
            self.made = PostgresStore(
                settings.database.database_url,
                max_size=1,
                secret=settings.database.database_secret_arn,
                pooled=settings.database.pooled,
                per_use=True,
                host=settings.database.database_host,
            )
        return getattr(self.made, name)


LAMBDA_EMF_S = 60.0
"""A Lambda container's EMF interval when EMF_INTERVAL_S is 0: a container without metrics lines
would leave the template's alarms blind."""


def build(
    env: Mapping[str, str] | None = None,
    metrics: Metrics | None = None,
    settings: Settings | None = None,
) -> LambdaEntry:
    """A container's handler: settings from the environment (or `settings`), AWS clients, the
    app; its signals counted in `metrics` when given."""
    settings = settings or Settings.from_env(env)
    refused = settings.open_to(None)
    if refused:
        raise SettingsError("AUTH", refused)
    traces.configure(settings.tracing, "lambda")
    metrics = metrics or Metrics()
    metrics.info.labels = {"mode": "aws", "role": "lambda"}
    aws = aws_ports(settings, metrics)
    store = cast(EdgeStore, LazyStore(settings))
    edge = Edge(
        stream=aws.stream,
        replies=aws.replies,
        store=store,
        settings=settings,
        metrics=metrics,
        health=Health(aws.edge_checks(store)),
        tell_s=CANCEL_PUT_S,
    )
    return LambdaEntry(Mangum(create_app(edge), lifespan="off", text_mime_types=TEXT))


class LambdaEntry:
    """Mangum behind a check of the one thing it cannot read itself: a Host header with an IPv6
    literal or a port that is not a number (`[::1]:3000`, `127.0.0.1:http`) made it answer a
    plain-text 500. API Gateway's own Host is its domain; `sam local` and `numerator up --edge
    lambda` pass the client's, which gets a 400 problem instead."""

    def __init__(self, mangum: Mangum) -> None:
        self.mangum = mangum
        self.app = mangum.app  # the app (FastPath) and its edge, for those who close them

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        host = (event.get("headers") or {}).get("host")
        if host is None or readable(host):
            return self.mangum(event, context)
        path = event.get("rawPath") or event.get("path") or ""
        detail = f"Host {host!r} names no host and numeric port: call by name or IPv4 address"
        return {
            "statusCode": 400,
            "headers": {"content-type": "application/problem+json"},
            "body": Problem(Kind.BAD_HOST, detail).body(path).decode(),
            "isBase64Encoded": False,
        }


def readable(host: str) -> bool:
    """Whether Mangum reads `host` (mangum.handlers.utils.get_server_and_port): a name alone,
    or one colon and a port of digits."""
    _, colon, port = host.partition(":")
    return not colon or (port.isdigit() and ":" not in port)


logger = Logger(service="numerator")
# Mangum logs a line for every request at INFO ("POST /counters/x/next 200"), which template.yaml's
# ApplicationLogLevel INFO would keep: about 170 bytes a request in CloudWatch Logs. Its errors
# (the app's exceptions) are logged at ERROR still.
logging.getLogger("mangum").setLevel(logging.WARNING)
copy_config_to_registered_loggers(
    source_logger=logger, include={"numerator.edge", "numerator.replies", "numerator.front"}
)
_container: tuple[LambdaEntry, Emf] | None = None


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """What Lambda calls (template.yaml: `functions/handler.handler`). The container's app is
    built by the first invocation and kept for every later one."""
    global _container
    if _container is None:
        metrics, settings = Metrics(), Settings.from_env()
        every = settings.frames.emf_interval_s or LAMBDA_EMF_S
        _container = build(metrics=metrics, settings=settings), Emf(metrics, "lambda", every)
        logger.info("container started")
    app, emf = _container
    try:
        return app(event, context)
    finally:
        emf.tick()
        if traces.ON:  # a frozen container sends nothing: its trace spans go now
            traces.flush()
