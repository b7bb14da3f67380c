"""The Lambda entry point: the Starlette app wrapped by Mangum, built once per container.

`/next` puts a record on Kinesis and awaits its reply in DynamoDB; it never touches Postgres (the
batcher tells an unknown counter apart). Counter CRUD and the API keys' reloads each open a
Postgres connection and close it when done, and answer 503 when they cannot: a container keeps
none while it is frozen between invocations (docs/architecture.md, "Connections").

Logs are Powertools' structured JSON with the invocation's request id, the app's own loggers
included; metrics go out as one CloudWatch EMF line per invocation (infra/observe/emf.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from mangum import Mangum

from functions.app import create_app
from functions.edge import CANCEL_PUT_S, Edge
from infra.adapters.serverless import aws_ports
from infra.errors import SettingsError
from infra.observe.emf import Emf
from infra.observe.health import Health
from infra.observe.metrics import Metrics
from infra.ports import EdgeStore
from infra.settings import Settings


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


def build(env: Mapping[str, str] | None = None, metrics: Metrics | None = None) -> Mangum:
    """A container's handler: settings from the environment, AWS clients, the app; its signals
    counted in `metrics` when given."""
    settings = Settings.from_env(env)
    refused = settings.open_to(None)
    if refused:
        raise SettingsError("AUTH", refused)
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
    return Mangum(create_app(edge), lifespan="off")


logger = Logger(service="numerator")
copy_config_to_registered_loggers(
    source_logger=logger, include={"numerator.edge", "numerator.replies", "numerator.front"}
)
_container: tuple[Mangum, Emf] | None = None


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """What Lambda calls (template.yaml: `functions/handler.handler`). The container's app is
    built by the first invocation and kept for every later one."""
    global _container
    if _container is None:
        metrics = Metrics()
        _container = build(metrics=metrics), Emf(metrics, "lambda")
        logger.info("container started")
    app, emf = _container
    try:
        return app(event, context)
    finally:
        emf.flush()
