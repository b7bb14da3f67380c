"""The Anchors port: where batchers keep the audit chains' heads outside Postgres, append-only.

A JSON-lines file locally (each record a line, flushed and synced), and on AWS an S3 bucket with
Object Lock in compliance mode (template.yaml's AnchorBucket): each record an object of its own
under `prefix`, which no one — not the account's root — can delete or overwrite until its
retention ends. `numerator audit verify --heads` reads either form back (docs/invoices.md), and so
does each batcher before it anchors again (`since`): it proves the trail still holds the heads
anchored last, by any batcher, and anchors nothing over a trail that does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
from botocore.exceptions import BotoCoreError, ClientError, ConnectionError

from infra.clock import utc_now
from infra.errors import AwsRefused, AwsUnavailable

log = logging.getLogger("numerator.batcher")

TAIL_BYTES = 1 << 20  # a file's latest records: its last MiB
LOOK_BACK = timedelta(days=1)  # a bucket's latest records: the last day's,
NEWEST = 200  # the newest of them at most (each record holds every chain's head)


def records(lines: list[bytes], where: str) -> list[dict[str, Any]]:
    """The anchor records among `lines`; a line that is not one is logged and left out (a
    record cut short by a crash as it was written)."""
    out = []
    for line in lines:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            record = None
        if isinstance(record, dict) and isinstance(record.get("heads"), dict):
            out.append(record)
        elif line.strip():
            log.warning("%s holds a line that is no anchor record: %r", where, line[:80])
    return out


class FileAnchors:
    """Heads as JSON lines appended to a file: for one machine, and for tests."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"FileAnchors({str(self.path)!r})"

    async def keep(self, record: Mapping[str, Any]) -> None:
        await asyncio.to_thread(self._append, orjson.dumps(record) + b"\n")

    async def since(self, mark: str) -> tuple[list[dict[str, Any]], str]:
        """Records after byte `mark` of the file (its last MiB for "")."""
        return await asyncio.to_thread(self._read, mark)

    def _read(self, mark: str) -> tuple[list[dict[str, Any]], str]:
        try:
            with self.path.open("rb") as kept:
                size = kept.seek(0, os.SEEK_END)
                start = int(mark) if mark else max(0, size - TAIL_BYTES)
                kept.seek(start)
                text = kept.read(size - start)
        except FileNotFoundError:
            return [], mark
        lines = text.split(b"\n")
        if not mark and start > 0:
            lines = lines[1:]  # the tail began inside a record
        whole, last = lines[:-1], lines[-1]  # the last line is not whole until it ends
        return records(whole, str(self.path)), str(start + len(text) - len(last))

    def _append(self, line: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab") as out:
            out.write(line)
            out.flush()
            os.fsync(out.fileno())


class S3Anchors:
    """Heads as objects in an S3 bucket with Object Lock: `prefix` + time + batcher, one per
    record. The bucket's default retention (compliance mode) locks each one as it is written."""

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix

    def __repr__(self) -> str:
        return f"S3Anchors('s3://{self.bucket}/{self.prefix}')"

    async def keep(self, record: Mapping[str, Any]) -> None:
        key = f"{self.prefix}{record['at']}-{record['by']}.json"
        body = orjson.dumps(record) + b"\n"  # `cat heads/*.json` then makes JSON lines
        with self._s3("keep"):
            await asyncio.to_thread(
                self.client.put_object,
                Bucket=self.bucket,
                Key=key,
                Body=body,
                ContentType="application/json",
                ChecksumAlgorithm="SHA256",  # S3 wants a checksum on a put to a locked bucket
            )

    async def since(self, mark: str) -> tuple[list[dict[str, Any]], str]:
        """Records whose keys come after key `mark`; for "", the newest NEWEST of the last
        day's, or when there are none (no batcher anchored for a day: each refused, or none
        ran), of all."""
        start = mark or f"{self.prefix}{(utc_now() - LOOK_BACK).isoformat()}"
        newest = None if mark else NEWEST
        with self._s3("read"):
            found = await asyncio.to_thread(self._read, start, newest)
            if not mark and not found[0]:
                found = await asyncio.to_thread(self._read, self.prefix, newest)
            return found

    @contextlib.contextmanager
    def _s3(self, doing: str) -> Iterator[None]:
        """botocore's errors as numerator's, in this module alone: cannot `doing` the heads."""
        where = f"cannot {doing} the heads in s3://{self.bucket}"
        try:
            yield
        except ConnectionError as exc:
            raise AwsUnavailable(f"{where}: {exc}") from exc
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            raise AwsRefused(code, f"{where}: {exc}") from exc
        except BotoCoreError as exc:
            raise AwsRefused(type(exc).__name__, f"{where}: {exc}") from exc

    def _read(self, start: str, newest: int | None) -> tuple[list[dict[str, Any]], str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix, StartAfter=start
        )
        keys = sorted(o["Key"] for page in pages for o in page.get("Contents", ()))
        read = keys[-newest:] if newest else keys
        bodies = [self.client.get_object(Bucket=self.bucket, Key=k)["Body"].read() for k in read]
        return records(bodies, f"s3://{self.bucket}"), max(keys, default=start)


def anchors_to(where: str, env: Mapping[str, str] | None = None) -> FileAnchors | S3Anchors | None:
    """The sink ANCHOR_TO names: s3://bucket/prefix, a path, or '' for none. `env` names the
    endpoint and credentials as boto3's variables do (moto, LocalStack)."""
    if not where:
        return None
    if where.startswith("s3://"):
        import boto3

        bucket, _, prefix = where[5:].partition("/")
        env = env or {}
        session = boto3.session.Session(
            aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
            region_name=env.get("AWS_DEFAULT_REGION"),
        )
        client = session.client("s3", endpoint_url=env.get("AWS_ENDPOINT_URL"))
        return S3Anchors(client, bucket, prefix)
    return FileAnchors(Path(where))
