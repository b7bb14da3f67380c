"""Replies only a batcher can sign (DESIGN.md, "Trust boundaries"): a reader of the stream — here
a forger reading every record of the real Kinesis stream on moto server, beside a real batcher
and server edge — learns the inboxes' addresses and nothing that lets it answer one. Its forged
pushes, signed every way a reader can (tests/forger.py), are all dropped; the control, the same
forger holding the key as if it had leaked, has its answers taken, so the 0 is not for want of
well-made datagrams arriving in time. The key rotates without a push refused: from a Secrets
Manager secret's stages, AWSPENDING accepted before AWSCURRENT moves to it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import boto3
import pytest

from infra.adapters.pushkeys import PushKeys, SecretKeys, held, new_key
from infra.settings import Settings
from tests.checks import until
from tests.forger import Forger, forged
from tests.integration.test_front import burst, running, values

BURSTS = 6


@pytest.mark.parametrize("leaked", [False, True], ids=["reader", "control-key-leaked"])
async def test_a_reader_of_the_stream_cannot_answer_a_request(
    aws: tuple[Settings, Any], name: str, leaked: bool
) -> None:
    settings, found = aws
    key = new_key()
    # Front frames put 20 ms after their first request, read on beats 300 ms apart: the forger,
    # reading every 5 ms, has each record long before a batcher does.
    slow = {"read_interval_ms": 300.0, "front_frame_policy": "fixed", "push_keys": key}
    async with running(settings, name, **slow) as (edge, client, _):
        assert edge.inbox is not None
        forger = Forger(found.kinesis, settings.aws.stream_name, [key.encode()] if leaked else [])
        forger.start()
        try:
            got = []
            for _ in range(BURSTS):
                got += await burst(client, name, 10)
            await until(lambda: edge.inbox.dropped >= forger.sent - forger.named, within=5)
        finally:
            forger.stop()
        dropped = edge.inbox.dropped
    assert [r.status_code for r in got] == [200] * len(got), [r.text for r in got]
    took = forged(values(got))
    assert forger.named >= BURSTS and forger.sent >= forger.named * 6, vars(forger)
    if leaked:  # the control: with the key, the forger does answer, first
        assert took, "the forger holding the key answered nothing: its datagrams are not taken"
        return
    assert took == [], f"{len(took)} forged values taken"
    assert sorted(values(got)) == list(range(1, 10 * BURSTS + 1))
    assert dropped >= forger.sent, (dropped, vars(forger))


async def test_without_a_push_key_nothing_is_pushed_and_the_table_answers(
    aws: tuple[Settings, Any], name: str
) -> None:
    settings, _ = aws
    async with running(settings, name) as (edge, client, back):
        assert edge.inbox is None and edge.edge.front is not None and edge.edge.front.to == ""
        got = await burst(client, name, 10)
        assert back.pusher.keys is None and back.metrics.pushes_sent.value == 0
    assert sorted(values(got)) == list(range(1, 11))


def put(client: Any, arn: str, key: str, stages: list[str]) -> str:
    version = uuid.uuid4().hex
    client.put_secret_value(
        SecretId=arn, SecretString=key, ClientRequestToken=version, VersionStages=stages
    )
    return version


async def test_a_rotation_through_the_secret_refuses_no_push(aws_endpoint: str) -> None:
    """docs/operations.md, "Rotating the push key": the new key put as AWSPENDING (edges accept
    it), then made AWSCURRENT (batchers sign with it; the old one, AWSPREVIOUS, still
    accepted), then the old one retired. An edge and a batcher that read the secret at
    different moments accept each other's datagrams at every step."""
    client = boto3.client("secretsmanager")
    old, new = new_key(), new_key()
    arn = client.create_secret(Name=f"push-{uuid.uuid4().hex[:8]}", SecretString=old)["ARN"]
    try:
        settings = Settings.of(push_key_secret_arn=arn, push_key_refresh_s=1.0).aws
        async with held(settings) as edge:
            assert edge is not None
            batcher = PushKeys(SecretKeys(arn).read())  # a batcher read at start only
            to = "127.0.0.1:4000"
            current = client.describe_secret(SecretId=arn)["VersionIdsToStages"]
            first = next(v for v, stages in current.items() if "AWSCURRENT" in stages)
            pending = put(client, arn, new, ["AWSPENDING"])
            await until(lambda: len(edge.ids) == 2, within=5)  # the edge accepts both
            assert edge.opened(to, batcher.sign(to, b"old")) == b"old"
            client.update_secret_version_stage(
                SecretId=arn,
                VersionStage="AWSCURRENT",
                MoveToVersionId=pending,
                RemoveFromVersionId=first,
            )
            client.update_secret_version_stage(
                SecretId=arn, VersionStage="AWSPENDING", RemoveFromVersionId=pending
            )
            moved = PushKeys(SecretKeys(arn).read())  # a batcher that read after the move
            assert moved.ids[0] == PushKeys([new.encode()]).ids[0]
            assert edge.opened(to, moved.sign(to, b"new")) == b"new"
            await asyncio.sleep(1.5)  # the edge read again: AWSPREVIOUS is still accepted
            assert edge.opened(to, batcher.sign(to, b"old")) == b"old"
            client.update_secret_version_stage(
                SecretId=arn, VersionStage="AWSPREVIOUS", RemoveFromVersionId=first
            )
            await until(lambda: len(edge.ids) == 1, within=5)  # retired: refused
            assert edge.opened(to, batcher.sign(to, b"old")) is None
            assert edge.opened(to, moved.sign(to, b"new")) == b"new"
    finally:
        client.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
