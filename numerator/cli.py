"""The `numerator` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from contextlib import AbstractContextManager, ExitStack, nullcontext
from pathlib import Path

from bench.cli import add_bench
from infra.adapters.postgres import migrate, migrations
from infra.errors import NumeratorError, StoreUnavailable
from infra.run.embedded import Postgres, default_data_dir, embedded, ephemeral
from infra.settings import LOOPBACK_ONLY, Auth, Mode, Settings, loopback
from numerator import __version__, client, console
from numerator.keys import add_keys
from numerator.ledger import add_ledger


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        raise SystemExit(2)
    try:
        args.run(args)
    except client.NumeratorError as exc:
        console.fail(str(exc))
    except BrokenPipeError:  # `numerator … | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="numerator", description="Unique, increasing numbers from named counters."
    )
    parser.add_argument("--version", action="version", version=f"numerator {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    up = commands.add_parser("up", help="run the service on this machine (embedded Postgres)")
    serving(up)
    up.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"where counter state is kept (default {default_data_dir()})",
    )
    up.add_argument(
        "--ephemeral", action="store_true", help="use a throwaway database, deleted on exit"
    )
    up.add_argument(
        "--aws",
        metavar="moto|URL",
        help="run the AWS path: Kinesis and DynamoDB from moto server started here (moto), or "
        "from the endpoint at URL (LocalStack: http://localhost:4566); a batcher process beside",
    )
    up.add_argument(
        "--edge",
        choices=["server", "lambda"],
        default="server",
        help="with --aws: HTTP workers (server), or each request as an API Gateway event through "
        "the Lambda handler in process (lambda)",
    )
    up.add_argument("--batchers", type=int, default=1, help="with --aws: batcher processes")
    up.set_defaults(run=run_up)

    serve = commands.add_parser(
        "serve", help="run HTTP workers against an existing Postgres (MODE=aws: the AWS edge)"
    )
    serving(serve)
    serve.add_argument(
        "--aws",
        nargs="?",
        const="aws",
        metavar="URL",
        help="the AWS path's edge (MODE=aws, front frames): on AWS itself, or on the endpoint at "
        "URL (LocalStack, moto server); the batchers run apart (`numerator batcher`)",
    )
    serve.set_defaults(run=run_serve)

    batcher = commands.add_parser(
        "batcher", help="run the batcher alone: Kinesis in, Postgres, DynamoDB out (MODE=aws)"
    )
    batcher.add_argument("--host", default="127.0.0.1", help="for /healthz and /metrics")
    batcher.add_argument("--port", type=int, default=8081, help="for /healthz and /metrics")
    batcher.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or None,
        help="the Postgres (default: $DATABASE_URL)",
    )
    batcher.add_argument(
        "--owner",
        default=None,
        help="the name this batcher holds shard leases under (default: a new random one). "
        "A batcher started under the name of one that is certainly dead takes its shards at "
        "once instead of after LEASE_TTL_S: how `up` restarts a batcher it saw die. Never "
        "give two running batchers one name",
    )
    batcher.set_defaults(run=run_batcher)

    migrating = commands.add_parser(
        "migrate",
        help="apply the schema to Postgres and exit (the deployment's one-off task)",
        description="Apply the migrations not yet applied to the Postgres that --database-url, "
        "DATABASE_URL (a URL or an RDS secret's JSON) or DATABASE_SECRET_ARN names; safe to "
        "run again, and beside running batchers.",
    )
    migrating.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or None,
        help="the Postgres (default: $DATABASE_URL)",
    )
    migrating.set_defaults(run=run_migrate)

    aws = commands.add_parser("aws", help="AWS resources")
    aws_actions = aws.add_subparsers(title="actions", metavar="ACTION")
    init = aws_actions.add_parser(
        "init", help="create the Kinesis stream and the DynamoDB reply table (idempotent)"
    )
    init.add_argument(
        "--endpoint", help="e.g. http://localhost:4566 (default: $AWS_ENDPOINT_URL, else AWS)"
    )
    init.add_argument("--shards", type=int, help="shards of a new stream (default: $SHARDS or 1)")
    init.set_defaults(run=run_aws_init)

    counters = commands.add_parser("counters", help="create, read and list counters")
    actions = counters.add_subparsers(title="actions", metavar="ACTION")
    create = actions.add_parser("create", help="create a counter")
    create.add_argument("name")
    create.add_argument("--start", type=int)
    create.add_argument("--template", help="e.g. 'INV-{yyyy}-{value:06d}'")
    create.add_argument("--reset", choices=["never", "yearly", "monthly", "daily"])
    create.add_argument("--timezone", help="IANA name, e.g. Europe/Berlin")
    create.add_argument(
        "--retention-days",
        type=int,
        help="keep the audit trail of a period this long after it ends (default: "
        "AUDIT_RETENTION_S)",
    )
    create.add_argument(
        "--confirm",
        action="store_const",
        const="required",
        help="each value must be confirmed (numerator confirm) within CONFIRM_TTL_S, else it "
        "is voided, not-confirmed",
    )
    talking(create)
    create.set_defaults(
        run=lambda a: console.create(
            service(a),
            a.json,
            name=a.name,
            start=a.start,
            template=a.template,
            reset=a.reset,
            timezone=a.timezone,
            retention_days=a.retention_days,
            confirm=a.confirm,
        )
    )
    get = actions.add_parser("get", help="show a counter and its last value")
    get.add_argument("name")
    talking(get)
    get.set_defaults(run=lambda a: console.get(service(a), a.name, a.json))
    listing = actions.add_parser("list", help="list counters")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--after", help="start after this name (the 'more' hint of a page)")
    talking(listing)
    listing.set_defaults(run=lambda a: console.listing(service(a), a.limit, a.after, a.json))

    nxt = commands.add_parser("next", help="take the next value(s) of a counter")
    nxt.add_argument("name")
    nxt.add_argument("--count", type=int, default=1)
    nxt.add_argument("--idempotency-key")
    talking(nxt)
    nxt.set_defaults(
        run=lambda a: console.next_values(service(a), a.name, a.count, a.idempotency_key, a.json)
    )

    add_keys(commands, talking)
    add_ledger(commands, actions, talking)
    add_bench(commands)
    return parser


def serving(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--workers", type=int, default=1, help="HTTP worker processes")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or None,
        help="use this Postgres (default: $DATABASE_URL)",
    )
    parser.add_argument(
        "--wait-for-db",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait at start for Postgres to take connections (default 10)",
    )


def talking(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get("NUMERATOR_URL", client.DEFAULT_URL),
        help="the service (default: $NUMERATOR_URL or %(default)s)",
    )
    parser.add_argument(
        "--key",
        default=os.environ.get("NUMERATOR_KEY") or None,
        help="the API key to send (default: $NUMERATOR_KEY; none: loopback, before any key)",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON the service sent")


def service(args: argparse.Namespace) -> client.Client:
    return console.service(args)


def settings_or_exit() -> Settings:
    """Settings from the environment, checked before anything starts."""
    try:
        return Settings.from_env()
    except NumeratorError as exc:
        console.fail(str(exc))


def port_or_exit(args: argparse.Namespace) -> None:
    """Stop here if this process cannot listen on --host/--port, or its settings must not."""
    from infra.run.server import cannot_listen

    problem = settings_or_exit().open_to(args.host) or cannot_listen(args.host, args.port)
    if problem:
        console.fail(problem)


async def who_may_call(url: str, host: str, settings: Settings) -> str:
    """How callers are checked, for the start-up line; a warning on stderr when the service
    listens beyond loopback and no key exists yet (Redis's protected mode does the same)."""
    if settings.edge.auth is Auth.NONE:
        return f"AUTH=none ({settings.edge.authorizer or 'loopback only'})"
    from infra.adapters.postgres import PostgresStore

    store = PostgresStore(url, max_size=1)
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


def run_up(args: argparse.Namespace) -> None:
    settings_or_exit()
    port_or_exit(args)
    if args.edge == "lambda" and not args.aws:
        console.fail("--edge lambda runs the AWS path: add --aws moto (or --aws URL)")
    if args.batchers < 1:
        console.fail("--batchers must be at least 1")
    if args.aws == "moto":
        from numerator import local

        try:
            local.require_moto()
        except NumeratorError as exc:
            console.fail(str(exc))
    database: AbstractContextManager[Postgres]
    if args.database_url:
        where = "the database at --database-url / DATABASE_URL"
        database = nullcontext(Postgres(args.database_url))
    elif args.ephemeral:
        where = "a throwaway database (--ephemeral): values are forgotten on exit"
        database = ephemeral()
    else:
        data_dir = (args.data_dir or default_data_dir()).expanduser().resolve()
        where = f"counter state in {data_dir}"
        database = embedded(data_dir)
    with ExitStack() as running:
        try:
            postgres = running.enter_context(database)
        except NumeratorError as exc:  # the data directory is held by another numerator
            console.fail(str(exc))
        if args.aws:
            serve_aws(args, postgres.url, where)
        else:
            serve_http(args, postgres.url, where)


def run_serve(args: argparse.Namespace) -> None:
    if args.aws:
        os.environ["MODE"] = "aws"
        if args.aws != "aws":
            use_endpoint(args.aws, "an endpoint URL (or nothing, for AWS)")
    settings_or_exit()
    port_or_exit(args)
    if not args.database_url:
        console.fail("serve needs --database-url or DATABASE_URL (use `numerator up` for local)")
    serve_http(args, args.database_url, "the database at DATABASE_URL")


async def migrate_when_ready(url: str, patience: float) -> None:
    """Apply migrations, waiting up to `patience` seconds for a Postgres that is starting up
    or recovering (after a crash, say) to take connections."""
    deadline = time.monotonic() + patience
    while True:
        try:
            await migrate(url)
            return
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.5)


def use_endpoint(endpoint: str, takes: str) -> None:
    """Point this process and its children at the AWS endpoint `--aws` names."""
    from numerator import local

    if not endpoint.startswith(("http://", "https://")):
        console.fail(f"--aws takes {takes}, not {endpoint!r}")
    os.environ.update(local.aws_environment(endpoint))


def serve_aws(args: argparse.Namespace, url: str, where: str) -> None:
    """`up --aws`: the endpoint (moto server started here, or a URL), the stream and table, the
    batcher process(es), then the HTTP edge in front."""
    from infra.adapters.aws import clients, create  # boto3 loads only where it is used
    from numerator import local

    with ExitStack() as running:
        children: list[local.Child] = []
        try:
            if args.aws == "moto":
                moto = running.enter_context(local.moto_server())
                children.append(moto)
                endpoint = moto.url
            else:
                endpoint = args.aws
            use_endpoint(endpoint, "moto or an endpoint URL")
            os.environ["DATABASE_URL"] = url
            os.environ["WORKERS"] = str(args.workers)
            settings = settings_or_exit()
            made = create(clients(settings), settings)
            asyncio.run(migrate_when_ready(url, args.wait_for_db))
            probes = running.enter_context(local.batchers(args.batchers, {"DATABASE_URL": url}))
            children.extend(probes)
        except NumeratorError as exc:
            console.fail(str(exc))
        what = "moto server" if args.aws == "moto" else "the endpoint"
        print(
            f"AWS path: {what} at {endpoint}; stream {settings.aws.stream_name} and table "
            f"{settings.aws.reply_table} ({', '.join(made) + ' created' if made else 'existing'}); "
            f"{len(probes)} batcher(s) ({', '.join(p.url for p in probes)}); edge: {args.edge}",
            flush=True,
        )
        if (
            args.edge == "lambda"
            and settings.edge.auth is Auth.NONE
            and not settings.edge.authorizer
        ):
            # A simulated container cannot see where the edge listens, and refuses AUTH=none
            # with nothing named in front, as Lambda would; here the front is this server, on
            # the loopback host port_or_exit has let through.
            os.environ["AUTHORIZER"] = f"{LOOPBACK_ONLY} ({args.host})"
        factory = (
            "numerator.lambdaedge:app_from_env"
            if args.edge == "lambda"
            else "numerator.stack:app_from_env"
        )
        supervisor = running.enter_context(local.Supervisor(children))
        serve_http(args, url, where, factory)
    if supervisor.failed:
        console.fail(f"stopped: {supervisor.failed}")


def serve_http(
    args: argparse.Namespace,
    url: str,
    where: str,
    factory: str = "numerator.stack:app_from_env",
) -> None:
    from infra.run.server import serve

    os.environ["DATABASE_URL"] = url
    os.environ["WORKERS"] = str(args.workers)  # for numerator_info in each worker
    settings = settings_or_exit()
    try:
        asyncio.run(migrate_when_ready(url, args.wait_for_db))
        auth = asyncio.run(who_may_call(url, args.host, settings))
    except NumeratorError as exc:
        console.fail(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("pgserver").setLevel(logging.WARNING)  # it logs every pg_ctl call
    # During an outage the pool logs every failed connection; the batcher's own warnings (one
    # per frame retry, with backoff) say the same once.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    logging.getLogger("botocore").setLevel(logging.WARNING)  # it logs where it found credentials
    logging.getLogger("mangum").setLevel(logging.WARNING)  # --edge lambda: a line per request
    frames, front = settings.frames, ""
    if settings.mode is Mode.AWS and factory == "numerator.stack:app_from_env":
        front = f", FRONT_FRAME_MS={settings.edge.front_frame_ms:g}"
    print(
        f"numerator is up at http://{args.host}:{args.port} ({where}; "
        f"{args.workers} worker(s), MODE={settings.mode}{front}, "
        f"FRAME_POLICY={frames.frame_policy}, BACK_FRAME_MS={frames.back_frame_ms:g}; "
        f"{auth}). "
        "Ctrl-C stops it.",
        flush=True,
    )
    print(
        f"metrics: http://{args.host}:{args.port}/metrics (Prometheus text format); to watch "
        "them with the shipped alerts, see docs/operations.md: a scrape job on "
        f"{args.host}:{args.port} and rule_files: [monitoring/rules.yml].",
        flush=True,
    )
    serve(factory, args.host, args.port, args.workers, settings)
    print("numerator stopped", file=sys.stderr, flush=True)


def run_batcher(args: argparse.Namespace) -> None:
    from numerator import probe

    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url
    settings = settings_or_exit()
    if settings.mode is not Mode.AWS:
        console.fail(
            "numerator batcher reads a Kinesis stream: set MODE=aws (and AWS_ENDPOINT_URL for "
            "LocalStack or moto); the embedded mode runs its batcher inside `numerator up`"
        )
    if not settings.database.database_url:
        console.fail("numerator batcher needs --database-url or DATABASE_URL")
    try:
        asyncio.run(migrate_when_ready(settings.database.database_url, 10.0))
    except NumeratorError as exc:
        console.fail(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    logging.getLogger("botocore").setLevel(logging.WARNING)
    probe.main(settings, args.host, args.port, args.owner)


def run_migrate(args: argparse.Namespace) -> None:
    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url
    settings = settings_or_exit()

    async def apply() -> None:
        from infra.adapters import secret

        url = await secret.resolve(
            settings.database.database_url, settings.database.database_secret_arn
        )
        if not url:
            console.fail(
                "numerator migrate needs --database-url, DATABASE_URL or DATABASE_SECRET_ARN"
            )
        await migrate_when_ready(url, 30.0)

    try:
        asyncio.run(apply())
    except NumeratorError as exc:
        console.fail(str(exc))
    versions = [version for version, _ in migrations()]
    print(f"the schema is current: migrations {versions[0]} to {versions[-1]} applied")


def run_aws_init(args: argparse.Namespace) -> None:
    from infra.adapters.aws import clients, create

    if args.endpoint:
        os.environ["AWS_ENDPOINT_URL"] = args.endpoint
    if args.shards is not None:
        os.environ["SHARDS"] = str(args.shards)
    settings = settings_or_exit()
    try:
        made = create(clients(settings), settings)
    except NumeratorError as exc:
        console.fail(str(exc))
    print(
        f"stream {settings.aws.stream_name} and table {settings.aws.reply_table}: "
        + (", ".join(made) + " created" if made else "both exist")
        + "; the table's TTL attribute is x"
    )


if __name__ == "__main__":
    main()
