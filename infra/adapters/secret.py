"""The database URL from a Secrets Manager secret (DATABASE_SECRET_ARN), read once, on first use:
in Lambda a /next never touches Postgres, so a container that only takes numbers never reads it."""

from __future__ import annotations

import asyncio

from infra.errors import SettingsError, StoreUnavailable
from infra.settings import database_url_of


async def resolve(url: str, secret: str) -> str:
    """`url` when given, else the one the secret `secret` holds (read now); empty when neither."""
    return url or (await database_url(secret) if secret else "")


async def database_url(secret: str) -> str:
    import boto3  # only where it is used: /next never comes here
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    config = Config(connect_timeout=2, read_timeout=5, retries={"mode": "standard"})
    client = boto3.session.Session().client("secretsmanager", config=config)
    try:
        value = await asyncio.to_thread(client.get_secret_value, SecretId=secret)
    except (BotoCoreError, ClientError) as exc:
        raise StoreUnavailable(f"cannot read the database secret {secret}: {exc}") from exc
    try:
        return database_url_of(value.get("SecretString") or "")
    except SettingsError as exc:
        raise StoreUnavailable(f"the database secret {secret}: {exc}") from exc
