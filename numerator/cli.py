"""The `numerator` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from bench.cli import add_bench
from infra.embedded import Postgres, default_data_dir, embedded, ephemeral
from infra.errors import NumeratorError, StoreUnavailable
from infra.postgres import migrate
from infra.settings import Settings
from numerator import __version__, client


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        raise SystemExit(2)
    try:
        args.run(args)
    except client.ClientError as exc:
        client.fail(str(exc))


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
    up.set_defaults(run=run_up)

    serve = commands.add_parser("serve", help="run HTTP workers against an existing Postgres")
    serving(serve)
    serve.set_defaults(run=run_serve)

    counters = commands.add_parser("counters", help="create, read and list counters")
    actions = counters.add_subparsers(title="actions", metavar="ACTION")
    create = actions.add_parser("create", help="create a counter")
    create.add_argument("name")
    create.add_argument("--start", type=int)
    create.add_argument("--template", help="e.g. 'INV-{yyyy}-{value:06d}'")
    create.add_argument("--reset", choices=["never", "yearly", "monthly", "daily"])
    create.add_argument("--timezone", help="IANA name, e.g. Europe/Berlin")
    talking(create)
    create.set_defaults(
        run=lambda a: client.create(
            a.url,
            a.json,
            name=a.name,
            start=a.start,
            template=a.template,
            reset=a.reset,
            timezone=a.timezone,
        )
    )
    get = actions.add_parser("get", help="show a counter and its last value")
    get.add_argument("name")
    talking(get)
    get.set_defaults(run=lambda a: client.get(a.url, a.name, a.json))
    listing = actions.add_parser("list", help="list counters")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--after", help="start after this name (the 'more' hint of a page)")
    talking(listing)
    listing.set_defaults(run=lambda a: client.listing(a.url, a.limit, a.after, a.json))

    nxt = commands.add_parser("next", help="take the next value(s) of a counter")
    nxt.add_argument("name")
    nxt.add_argument("--count", type=int, default=1)
    nxt.add_argument("--idempotency-key")
    talking(nxt)
    nxt.set_defaults(
        run=lambda a: client.next_values(a.url, a.name, a.count, a.idempotency_key, a.json)
    )

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
    parser.add_argument("--json", action="store_true", help="print the JSON the service sent")


def settings_or_exit() -> Settings:
    """Settings from the environment, checked before anything starts."""
    try:
        return Settings.from_env()
    except NumeratorError as exc:
        client.fail(str(exc))


def port_or_exit(args: argparse.Namespace) -> None:
    from infra.server import cannot_listen

    problem = cannot_listen(args.host, args.port)
    if problem:
        client.fail(problem)


def run_up(args: argparse.Namespace) -> None:
    settings_or_exit()
    port_or_exit(args)
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
    with database as postgres:
        serve_http(args, postgres.url, where)


def run_serve(args: argparse.Namespace) -> None:
    settings_or_exit()
    port_or_exit(args)
    if not args.database_url:
        client.fail("serve needs --database-url or DATABASE_URL (use `numerator up` for local)")
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


def serve_http(args: argparse.Namespace, url: str, where: str) -> None:
    from infra.server import serve

    os.environ["DATABASE_URL"] = url
    os.environ["NUMERATOR_WORKERS"] = str(args.workers)  # for numerator_info in each worker
    settings = settings_or_exit()
    try:
        asyncio.run(migrate_when_ready(url, args.wait_for_db))
    except NumeratorError as exc:
        client.fail(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("pgserver").setLevel(logging.WARNING)  # it logs every pg_ctl call
    # During an outage the pool logs every failed connection; the batcher's own warnings (one
    # per frame retry, with backoff) say the same once.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    print(
        f"numerator is up at http://{args.host}:{args.port} ({where}; "
        f"{args.workers} worker(s), BACK_FRAME_MS={settings.back_frame_ms:g}). Ctrl-C stops it.",
        flush=True,
    )
    serve("numerator.stack:app_from_env", args.host, args.port, args.workers)
    print("numerator stopped", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
