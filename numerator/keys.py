"""`numerator keys create|list|revoke`: API keys, over the admin API of a running service
(`--url`, with an admin key in `--key` or NUMERATOR_KEY; before any key exists, from the
service's own machine without one), or straight on Postgres with `--database-url`: how a
deployment's first key is made where no client runs on the service's machine."""

from __future__ import annotations

import argparse
import asyncio

from infra import keys
from infra.clock import utc_now
from infra.errors import InvalidKey, KeyExists
from numerator import client, console


def run(args: argparse.Namespace) -> None:
    action = args.action
    if args.database_url:
        asyncio.run(direct(args, action))
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
    from infra.settings import Settings

    pooled = Settings.from_env().database.pooled  # DATABASE_POOLER, as the service reads it
    await migrate(args.database_url, pooled)
    store = PostgresStore(args.database_url, max_size=1, pooled=pooled)
    try:
        if action == "create":
            try:
                key, secret = keys.new(args.name, args.scope, utc_now())
            except InvalidKey as exc:
                raise client.ClientError(str(exc)) from None
            try:
                key = await store.add_key(key)
            except KeyExists:
                raise client.ClientError(f"an unrevoked key named {args.name!r} exists") from None
            console.show_key({**key.to_json(), "secret": secret}, args.json)
        elif action == "list":
            console.show_keys([key.to_json() for key in await store.keys()], args.json)
        else:
            revoked = await store.revoke_key(args.name)
            if revoked is None:
                raise client.ClientError(f"no unrevoked key named {args.name!r}")
            console.show_key(revoked.to_json(), args.json)
    finally:
        await store.close()
