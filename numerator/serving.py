"""The service's processes from the command line: `up`, `serve`, `batcher`, `migrate`, `aws init`.

Each builds its settings once, from the environment and its options, and hands them to the
processes it starts (`Settings.to_env()`, with the AWS endpoint's environment beside): nothing
here writes `os.environ`. Errors are raised, and said once by `numerator.cli`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager

from infra.adapters.postgres import migrate, migrations
from infra.errors import Refused, StoreUnavailable
from infra.faults import Faults
from infra.run.embedded import Postgres, default_data_dir, embedded, ephemeral
from infra.settings import LOOPBACK_ONLY, Auth, Mode, Settings, loopback, with_host

EMBEDDED_APP = "numerator.stack:app_from_env"
LAMBDA_APP = "numerator.lambdaedge:app_from_env"


def settings_of(args: argparse.Namespace, **given: object) -> Settings:
    """The environment's settings, with what the options and the caller say instead."""
    options = {"database_url": getattr(args, "database_url", None), **given}
    return Settings.from_env().but(**{k: v for k, v in options.items() if v is not None})


def listening(settings: Settings, host: str, port: int) -> None:
    """Refuse here if this process cannot listen on host:port, or its settings must not."""
    from infra.run.server import cannot_listen, claim

    problem = settings.open_to(host) or cannot_listen(host, port)
    if problem:
        raise Refused(problem)
    claim(port)  # its batchers' /healthz ports are not this one


def run_up(args: argparse.Namespace) -> None:
    if args.edge == "lambda" and not args.aws:
        raise Refused("--edge lambda runs the AWS path: add --aws moto (or --aws URL)")
    if args.batchers < 1:
        raise Refused("--batchers must be at least 1")
    trace = str(args.trace.resolve()) if args.trace else None
    settings = settings_of(args, workers=args.workers, tiers=args.tiers, trace_file=trace)
    listening(settings, args.host, args.port)
    traced(settings)
    if args.aws == "moto":
        from numerator import local

        local.require_moto()
    with database(args) as (postgres, where):
        settings = settings.but(database_url=postgres.url)
        if args.aws:
            serve_aws(args, settings, where)
        else:
            serve_http(args, settings, where)


@contextmanager
def database(args: argparse.Namespace) -> Iterator[tuple[Postgres, str]]:
    """The Postgres `up` serves from, and how the start-up line names it."""
    if args.database_url:
        yield Postgres(args.database_url), "the database at --database-url / DATABASE_URL"
    elif args.ephemeral:
        with ephemeral() as postgres:
            yield postgres, "a throwaway database (--ephemeral): values are forgotten on exit"
    else:
        data_dir = (args.data_dir or default_data_dir()).expanduser().resolve()
        with embedded(data_dir) as postgres:
            yield postgres, f"counter state in {data_dir}"


def traced(settings: Settings) -> None:
    """Say where trace spans go, if anywhere; refuse at once if the SDK is not installed (each
    child would refuse on its own)."""
    from infra.observe import traces

    if settings.tracing.on:
        traces.require(settings.tracing)
        where = [settings.tracing.trace_file, settings.tracing.otel_exporter_otlp_endpoint]
        print(f"traces: {' and '.join(w for w in where if w)}", flush=True)


def run_serve(args: argparse.Namespace) -> None:
    aws: dict[str, str] = {}
    if args.aws:
        from numerator import local

        aws = {"MODE": "aws"}
        if args.aws != "aws":
            aws = local.aws_environment(endpoint(args.aws, "an endpoint URL (or nothing, for AWS)"))
    settings = settings_of(args, workers=args.workers, tiers=args.tiers, mode=aws.get("MODE"))
    listening(settings, args.host, args.port)
    traced(settings)
    if not settings.database.database_url:
        raise Refused("serve needs --database-url or DATABASE_URL (use `numerator up` for local)")
    serve_http(args, settings, "the database at DATABASE_URL", env=aws)


async def migrate_when_ready(url: str, patience: float, pooled: bool = False) -> None:
    """Apply migrations, waiting up to `patience` seconds for a Postgres that is starting up
    or recovering (after a crash, say) to take connections; `pooled`: DATABASE_POOLER."""
    deadline = time.monotonic() + patience
    while True:
        try:
            await migrate(url, pooled)
            return
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.5)


def endpoint(given: str, takes: str) -> str:
    if not given.startswith(("http://", "https://")):
        raise Refused(f"--aws takes {takes}, not {given!r}")
    return given


def serve_aws(args: argparse.Namespace, settings: Settings, where: str) -> None:
    """`up --aws`: the endpoint (moto server started here, or a URL), the stream and table, the
    batcher process(es), then the HTTP edge in front."""
    from infra.adapters.aws import clients, create  # boto3 loads only where it is used
    from infra.adapters.pushkeys import new_key
    from numerator import local

    with ExitStack() as running:
        children: list[local.Child] = []
        if args.aws == "moto":
            moto = running.enter_context(local.moto_server())
            children.append(moto)
            url = moto.url
        else:
            url = endpoint(args.aws, "moto or an endpoint URL")
        aws = local.aws_environment(url)
        settings = settings.but(mode=Mode.AWS)
        if "REPLY_PUSH" not in os.environ:  # its batchers run here: no inbox open to the network
            settings = settings.but(reply_push="127.0.0.1")
        if not (settings.aws.push_keys or settings.aws.push_key_secret_arn):
            # The key its batchers sign pushed replies with and its edges check them with:
            # handed to them in their environment, never put on the stream.
            settings = settings.but(push_keys=new_key())
        made = create(clients(settings, aws), settings)
        asyncio.run(
            migrate_when_ready(
                settings.database.database_url, args.wait_for_db, settings.database.pooled
            )
        )
        batchers = local.batchers(args.batchers, {**settings.to_env(), **aws})
        children.extend(running.enter_context(batchers))
        what = "moto server" if args.aws == "moto" else "the endpoint"
        print(
            f"AWS path: {what} at {url}; stream {settings.aws.stream_name} and table "
            f"{settings.aws.reply_table} ({', '.join(made) + ' created' if made else 'existing'}); "
            f"{args.batchers} batcher(s) ({', '.join(c.url for c in children[-args.batchers :])})"
            f"; edge: {args.edge}",
            flush=True,
        )
        app = EMBEDDED_APP
        if args.edge == "lambda":
            app = LAMBDA_APP
            if settings.edge.auth is Auth.NONE and not settings.edge.authorizer:
                # A simulated container cannot see where the edge listens, and refuses AUTH=none
                # with nothing named in front, as Lambda would; here the front is this server, on
                # the loopback host `listening` has let through.
                settings = settings.but(authorizer=f"{LOOPBACK_ONLY} ({args.host})")
        supervisor = running.enter_context(local.ProcessSupervisor(children))
        serve_http(args, settings, where, app, aws)
    if supervisor.failed:
        raise Refused(f"stopped: {supervisor.failed}")


def serve_http(
    args: argparse.Namespace,
    settings: Settings,
    where: str,
    app: str = EMBEDDED_APP,
    env: Mapping[str, str] | None = None,
) -> None:
    """Migrate, say how callers are checked, then serve `app` in --workers processes, each
    given `settings` and `env` (the AWS endpoint's) through its environment."""
    from infra.run.server import serve

    url = settings.database.database_url
    asyncio.run(migrate_when_ready(url, args.wait_for_db, settings.database.pooled))
    auth = asyncio.run(who_may_call(url, args.host, settings))
    quiet_loggers()
    frames, front, tiers = settings.frames, "", ""
    if settings.mode is Mode.EMBEDDED and args.workers > 1:
        tiers = " and one batcher" if settings.local.tiers == 2 else ", each its own batcher"
    if settings.mode is Mode.AWS and app == EMBEDDED_APP:
        front = f", FRONT_FRAME_MS={settings.edge.front_frame_ms:g}"
    print(
        f"numerator is up at http://{args.host}:{args.port} ({where}; "
        f"{args.workers} worker(s){tiers}, MODE={settings.mode}{front}, "
        f"FRAME_POLICY={frames.frame_policy}, BACK_FRAME_MS={frames.back_frame_ms:g}; "
        f"{auth}). "
        "Ctrl-C stops it.",
        flush=True,
    )
    print(
        f"metrics: http://{args.host}:{args.port}/metrics (Prometheus text format); to watch "
        "them with the shipped alerts, `numerator monitoring DIR` writes the rules, a Grafana "
        f"dashboard and their runbook to DIR: a scrape job on {args.host}:{args.port} and "
        "rule_files: [DIR/rules.yml] (DIR/docs/operations.md).",
        flush=True,
    )
    beside = None
    if settings.mode is Mode.EMBEDDED and args.workers > 1 and settings.local.tiers == 2:
        from numerator import local

        beside = local.hub_batcher  # the machine's batcher, its workers' second tier
    serve(app, args.host, args.port, args.workers, settings, env or {}, beside)
    print("numerator stopped", file=sys.stderr, flush=True)


def quiet_loggers() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("pgserver").setLevel(logging.WARNING)  # it logs every pg_ctl call
    # During an outage the pool logs every failed connection; the batcher's own warnings (one
    # per frame retry, with backoff) say the same once.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    logging.getLogger("botocore").setLevel(logging.WARNING)  # it logs where it found credentials
    logging.getLogger("mangum").setLevel(logging.WARNING)  # --edge lambda: a line per request


async def who_may_call(url: str, host: str, settings: Settings) -> str:
    """How callers are checked, for the start-up line; a warning on stderr when the service
    listens beyond loopback and no key exists yet (Redis's protected mode does the same)."""
    if settings.edge.auth is Auth.NONE:
        return f"AUTH=none ({settings.edge.authorizer or 'loopback only'})"
    from infra.adapters.postgres import PostgresStore

    store = PostgresStore(url, max_size=1, pooled=settings.database.pooled)
    try:
        found = await store.keys()
    finally:
        await store.close()
    live = sum(1 for key in found if key.revoked is None)
    if found:
        return f"AUTH=keys, {live} live key(s)"
    if not loopback(host):
        print(
            f"numerator: WARNING: listening on {host} with no API key: only clients on this "
            "machine are served, others get 401. Create a key here with "
            "`numerator keys create NAME --scope admin`.",
            file=sys.stderr,
            flush=True,
        )
    return "AUTH=keys, no key yet: loopback clients only"


def run_batcher(args: argparse.Namespace) -> None:
    from numerator import batcherprocess

    settings = settings_of(args, hub=args.hub)
    if settings.mode is not Mode.AWS and not settings.local.hub:
        raise Refused(
            "numerator batcher reads a Kinesis stream: set MODE=aws (and AWS_ENDPOINT_URL for "
            "LocalStack or moto); the embedded mode runs its batcher inside `numerator up`, or "
            "as the machine's batcher of its workers (--hub SOCKET)"
        )
    if not settings.database.database_url:
        raise Refused("numerator batcher needs --database-url or DATABASE_URL")
    asyncio.run(migrate_when_ready(settings.database.database_url, 10.0, settings.database.pooled))
    quiet_loggers()
    batcherprocess.main(settings, args.host, args.port, args.owner, Faults.from_env())


def run_migrate(args: argparse.Namespace) -> None:
    from infra.adapters import secret

    settings = settings_of(args)
    database = settings.database

    async def apply() -> None:
        url = await secret.resolve(database.database_url, database.database_secret_arn)
        url = with_host(url, database.database_host)  # an env's DATABASE_URL has it already
        if not url:
            raise Refused(
                "numerator migrate needs --database-url, DATABASE_URL or DATABASE_SECRET_ARN"
            )
        await migrate_when_ready(url, 30.0, database.pooled)

    asyncio.run(apply())
    versions = [version for version, _ in migrations()]
    print(f"the schema is current: migrations {versions[0]} to {versions[-1]} applied")


def run_aws_init(args: argparse.Namespace) -> None:
    from infra.adapters.aws import clients, create
    from infra.run.process import aws_init_env

    settings = Settings.from_env()
    if args.shards is not None:
        settings = settings.but(shards=args.shards)
    aws = aws_init_env(args.endpoint)
    made = create(clients(settings, aws), settings)
    print(
        f"stream {settings.aws.stream_name} and table {settings.aws.reply_table}: "
        + (", ".join(made) + " created" if made else "both exist")
        + "; the table's TTL attribute is x"
    )
