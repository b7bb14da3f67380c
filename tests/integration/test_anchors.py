"""Anchored heads on the AWS path (issue 29): the batcher keeps the audit chains' heads in an S3
bucket with Object Lock in compliance mode, as template.yaml's AnchorBucket is made, on moto
server; a kept record cannot be deleted or overwritten, and verify holds the trail to it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import orjson
import pytest
from botocore.exceptions import ClientError

from infra.adapters.anchors import S3Anchors, anchors_to
from infra.settings import Settings
from numerator.ledger import anchors
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client
from tests.checks import until


@pytest.fixture
def bucket(aws_endpoint: str) -> Iterator[tuple[Any, str]]:
    """A bucket of this test's own with Object Lock, compliance mode, one day by default."""
    s3 = boto3.client("s3", endpoint_url=aws_endpoint)
    name = f"anchors-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    s3.put_object_lock_configuration(
        Bucket=name,
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 1}},
        },
    )
    yield s3, name


async def test_a_kept_record_is_locked_in_compliance_mode(bucket: tuple[Any, str]) -> None:
    s3, name = bucket
    sink = anchors_to(f"s3://{name}/heads/")
    assert isinstance(sink, S3Anchors)
    record = {"at": "2026-12-02T00:00:00+00:00", "by": "b1", "heads": {"s/0/c": {"row": 1}}}
    await sink.keep(record)
    (listed,) = s3.list_object_versions(Bucket=name, Prefix="heads/")["Versions"]
    key, version = listed["Key"], listed["VersionId"]
    assert key == "heads/2026-12-02T00:00:00+00:00-b1.json"
    assert orjson.loads(s3.get_object(Bucket=name, Key=key)["Body"].read()) == record
    head = s3.head_object(Bucket=name, Key=key)
    assert head["ObjectLockMode"] == "COMPLIANCE" and head["ObjectLockRetainUntilDate"]
    with pytest.raises(ClientError) as refused:
        s3.delete_object(Bucket=name, Key=key, VersionId=version)
    assert refused.value.response["Error"]["Code"] == "AccessDenied"


async def test_the_heads_kept_are_read_back_from_the_mark_on(bucket: tuple[Any, str]) -> None:
    """What a batcher reads before it anchors (batcher/chores.py Anchoring): every record kept
    since its mark, any batcher's, and a mark past them."""
    _, name = bucket
    sink = anchors_to(f"s3://{name}/heads/")
    assert isinstance(sink, S3Anchors)
    assert await sink.since("") == ([], "heads/"), "an empty bucket"
    one = {"at": "2026-12-02T00:00:00+00:00", "by": "b1", "heads": {"s/0/c": {"row": 1}}}
    two = {"at": "2026-12-02T00:01:00+00:00", "by": "b2", "heads": {"s/0/c": {"row": 2}}}
    await sink.keep(one)
    found, mark = await sink.since("")  # older than a day: read from the start
    assert found == [one]
    await sink.keep(two)
    assert await sink.since(mark) == ([two], "heads/2026-12-02T00:01:00+00:00-b2.json")


async def test_the_batcher_anchors_to_s3_and_verify_holds_the_trail_to_it(
    bucket: tuple[Any, str], settings: Settings, fresh_database: str
) -> None:
    s3, name = bucket
    quick = settings.but(
        database_url=fresh_database, anchor_to=f"s3://{name}/heads/", anchor_every_s=0.2
    )
    async with EmbeddedStack(quick) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": "inv"})
        for _ in range(3):
            assert (await client.post("/counters/inv/next")).status_code == 200
        now = (await client.get("/audit/heads")).json()["heads"]

        def kept() -> list[str]:
            found = s3.list_objects_v2(Bucket=name, Prefix="heads/").get("Contents", [])
            texts = [
                s3.get_object(Bucket=name, Key=o["Key"])["Body"].read().decode() for o in found
            ]
            return [t for t in texts if orjson.loads(t)["heads"] == now]

        await until(kept, within=10)
        text = "\n".join(kept())
        held = await client.post("/audit/verify", json={"heads": anchors(text)})
    assert held.status_code == 200 and held.json()["anchors"]["held"] == sorted(now), held.text
