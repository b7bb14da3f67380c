"""The keys pushed replies are signed with (infra/adapters/push.py): a secret the batchers and
the server edges share out of band, never written into a record, so that a reader of the stream
learns nothing that lets it answer a request.

A key is text of at least MIN_PUSH_KEY characters; it is named on the wire by a short id (a hash of
it, which tells nothing of it), so that an edge holding several keys checks a datagram with the
one that signed it. One key signs, the others are only accepted: during a rotation an edge
accepts the new key before any batcher signs with it, and the old one until none does.

Where they come from: PUSH_KEYS (the signing key first, then those accepted; `numerator up`
makes one for its children), or the Secrets Manager secret PUSH_KEY_SECRET_ARN, read at start
and every PUSH_KEY_REFRESH_S: its AWSCURRENT version signs, AWSPREVIOUS and AWSPENDING are
accepted (docs/operations.md, "Rotating the push key").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any

from infra.errors import SettingsError, Unavailable
from infra.settings import MIN_PUSH_KEY, AwsSettings

log = logging.getLogger("numerator.push")

KEY_ID = 4  # bytes of a key's id on the wire
DIGEST = 32  # HMAC-SHA256's bytes
STAGES = ("AWSCURRENT", "AWSPENDING", "AWSPREVIOUS")  # the signing one first


def key_id(key: bytes) -> bytes:
    return hashlib.sha256(b"numerator push key id\n" + key).digest()[:KEY_ID]


def new_key() -> str:
    """A fresh key (64 hex digits: 256 bits), as `numerator up` hands its children."""
    return secrets.token_hex(32)


def parsed(text: str, variable: str = "PUSH_KEYS") -> list[bytes]:
    """The keys a comma-separated list holds, the signing one first; refused, naming
    `variable`, when one is too short to keep a guesser out."""
    keys = [part.strip().encode() for part in text.split(",") if part.strip()]
    for key in keys:
        if len(key) < MIN_PUSH_KEY:
            raise SettingsError(variable, f"each key must be at least {MIN_PUSH_KEY} characters")
    return keys


class PushKeys:
    """The keys this process signs and checks pushed replies with; changed in place on a
    rotation, so that the inbox and the pusher that hold it see the change at once."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("PushKeys needs at least the signing key")
        self.replace(keys)

    def replace(self, keys: Sequence[bytes]) -> None:
        """Sign with `keys[0]` from now on; accept every one of `keys`."""
        self._signing = (key_id(keys[0]), keys[0])
        self._accepted = {key_id(key): key for key in keys}

    @property
    def ids(self) -> list[str]:
        """The ids of the keys accepted (hex), the signing one first: for logs and tests."""
        first = self._signing[0]
        return [first.hex()] + [k.hex() for k in self._accepted if k != first]

    def sign(self, to: str, payload: bytes) -> bytes:
        """A datagram for the inbox `to` (what its records name): the key's id, the MAC of the
        id, `to` and the payload, then the payload. `to` is in the MAC so that a datagram sent
        to one inbox answers nothing at another."""
        kid, key = self._signing
        return kid + _mac(key, kid, to, payload) + payload

    def opened(self, to: str, datagram: bytes) -> bytes | None:
        """The payload of `datagram` if one of the keys signed it for `to`; None otherwise."""
        head = KEY_ID + DIGEST
        if len(datagram) < head:
            return None
        kid, digest, payload = datagram[:KEY_ID], datagram[KEY_ID:head], datagram[head:]
        key = self._accepted.get(kid)
        if key is None:
            return None
        return payload if hmac.compare_digest(digest, _mac(key, kid, to, payload)) else None


def _mac(key: bytes, kid: bytes, to: str, payload: bytes) -> bytes:
    return hmac.new(key, kid + to.encode() + b"\n" + payload, hashlib.sha256).digest()


class SecretKeys:
    """The push keys a Secrets Manager secret holds, by its version stages: AWSCURRENT signs,
    AWSPENDING (a key being rolled out) and AWSPREVIOUS (one being retired) are accepted."""

    def __init__(self, arn: str, client: Any = None) -> None:
        self.arn = arn
        self._client = client
        self._values: dict[str, bytes] = {}  # a version's id: its key, read once

    def client(self) -> Any:
        if self._client is None:
            import boto3  # only where the secret is used
            from botocore.config import Config

            config = Config(connect_timeout=2, read_timeout=5, retries={"mode": "standard"})
            self._client = boto3.session.Session().client("secretsmanager", config=config)
        return self._client

    def read(self) -> list[bytes]:
        """The keys, the signing one first (blocking: one ListSecretVersionIds, and one
        GetSecretValue for each version not read before)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            staged = self._staged()
            keys = [self._value(version) for version in staged]
        except (BotoCoreError, ClientError) as exc:
            raise Unavailable(f"cannot read the push key secret {self.arn}: {exc}") from exc
        if not keys:
            raise Unavailable(f"the push key secret {self.arn} has no AWSCURRENT version")
        return parsed(b",".join(keys).decode(), "PUSH_KEY_SECRET_ARN")

    def _staged(self) -> list[str]:
        """The versions that carry a stage, AWSCURRENT's first (none without one)."""
        listed = self.client().list_secret_version_ids(SecretId=self.arn, MaxResults=100)
        by_stage = {
            stage: version["VersionId"]
            for version in listed.get("Versions", [])
            for stage in version.get("VersionStages", [])
        }
        if "AWSCURRENT" not in by_stage:
            return []
        return list(dict.fromkeys(by_stage[stage] for stage in STAGES if stage in by_stage))

    def _value(self, version: str) -> bytes:
        if version not in self._values:
            got = self.client().get_secret_value(SecretId=self.arn, VersionId=version)
            self._values[version] = (got.get("SecretString") or "").strip().encode()
        return self._values[version]


async def follow(keys: PushKeys, source: SecretKeys, every: float) -> None:
    """Read `source` every `every` seconds into `keys`, until cancelled; a read that fails is
    logged, and the keys held are kept until one works."""
    while True:
        await asyncio.sleep(every)
        try:
            found = await asyncio.to_thread(source.read)
        except (Unavailable, SettingsError) as exc:
            log.warning("%s: keeping the push keys held (%s)", exc, ", ".join(keys.ids))
            continue
        before = keys.ids
        keys.replace(found)
        if keys.ids != before:
            log.info("push keys now %s (was %s)", ", ".join(keys.ids), ", ".join(before))


@contextlib.asynccontextmanager
async def held(settings: AwsSettings, client: Any = None) -> AsyncIterator[PushKeys | None]:
    """The push keys the settings name, read now (and, from a secret, again every
    PUSH_KEY_REFRESH_S while inside); None when they name none: then nothing is pushed."""
    if settings.push_keys:
        yield PushKeys(parsed(settings.push_keys))
        return
    if not settings.push_key_secret_arn:
        yield None
        return
    source = SecretKeys(settings.push_key_secret_arn, client)
    keys = PushKeys(await asyncio.to_thread(source.read))
    task = asyncio.create_task(follow(keys, source, settings.push_key_refresh_s))
    try:
        yield keys
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
