"""`numerator keys create|list|revoke`: API keys, over the admin API of a running service
(`--url`, with an admin key in `--key` or NUMERATOR_KEY; before any key exists, from the
service's own machine without one), or straight on Postgres with `--database-url`: how a
deployment's first key is made where no client runs on the service's machine."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any

from infra import keys
from infra.clock import utc_now
from infra.errors import InvalidKey, KeyExists, NumeratorError
from numerator import client, console

SCOPES_HELP = (
    "admin (everything), read (the GET routes) or next:PATTERN (take values of the counters "
    "whose name matches the glob, e.g. next:inv-*); repeat for several"
)


def add_keys(commands: Any, talking: Callable[[argparse.ArgumentParser], None]) -> None:
    parser = commands.add_parser("keys", help="create, list and revoke API keys")
    actions = parser.add_subparsers(title="actions", metavar="ACTION")
    create = actions.add_parser("create", help="create a key and print its secret, once")
    create.add_argument("name")
    create.add_argument("--scope", action="append", required=True, help=SCOPES_HELP)
    listing = actions.add_parser("list", help="list keys (never their secrets)")
    revoke = actions.add_parser("revoke", help="revoke the key of this name")
    revoke.add_argument("name")
    for action in (create, listing, revoke):
        talking(action)
        action.add_argument(
            "--database-url",
            help="work on this Postgres directly instead of over the API (the first key)",
        )
    create.set_defaults(run=lambda a: run(a, "create"))
    listing.set_defaults(run=lambda a: run(a, "list"))
    revoke.set_defaults(run=lambda a: run(a, "revoke"))


def run(args: argparse.Namespace, action: str) -> None:
    if args.database_url:
        try:
            asyncio.run(direct(args, action))
        except (NumeratorError, client.NumeratorError) as exc:
            console.fail(str(exc))
        return
    talk = console.service(args)
    if action == "create":
        body = {"name": args.name, "scopes": args.scope}
        console.show_key(console.call(talk, "POST", "/keys", json=body), args.json)
    elif action == "list":
        console.show_keys(console.call(talk, "GET", "/keys")["keys"], args.json)
    else:
        console.show_key(console.call(talk, "DELETE", f"/keys/{args.name}"), args.json)


async def direct(args: argparse.Namespace, action: str) -> None:
    from infra.adapters.postgres import PostgresStore, migrate

    await migrate(args.database_url)
    store = PostgresStore(args.database_url, max_size=1)
    try:
        if action == "create":
            try:
                key, secret = keys.new(args.name, args.scope, utc_now())
            except InvalidKey as exc:
                raise client.NumeratorError(str(exc)) from None
            try:
                key = await store.add_key(key)
            except KeyExists:
                raise client.NumeratorError(
                    f"an unrevoked key named {args.name!r} exists"
                ) from None
            console.show_key({**key.to_json(), "secret": secret}, args.json)
        elif action == "list":
            console.show_keys([key.to_json() for key in await store.keys()], args.json)
        else:
            revoked = await store.revoke_key(args.name)
            if revoked is None:
                raise client.NumeratorError(f"no unrevoked key named {args.name!r}")
            console.show_key(revoked.to_json(), args.json)
    finally:
        await store.close()
