"""Replies only a batcher can sign (DESIGN.md, "Trust boundaries"): a reader of the stream — here
a forger reading every record of the real Kinesis stream on moto server, beside a real batcher
and server edge — learns the inboxes' addresses and nothing that lets it answer one. Its forged
pushes, signed every way a reader can (tests/forger.py), are all dropped; the control, the same
forger holding the key as if it had leaked, has its answers taken, so the 0 is not for want of
well-made datagrams arriving in time. The key rotates without a push refused, as
docs/operations.md says to: by a Secrets Manager secret's stages, AWSPENDING accepted before
AWSCURRENT moves to it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from infra.adapters.pushkeys import PushKeys, SecretKeys, held, new_key
from infra.errors import Refused
from infra.settings import Settings
from numerator import pushkey
from tests.checks import until
from tests.forger import Forger, forged
from tests.front import burst, running, values

BURSTS = 6
ROOT = Path(__file__).parents[2]


@pytest.mark.slow  # two stacks, six bursts on 300 ms beats each: 4-7 s
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


def rotation() -> list[str]:
    """The lines of docs/operations.md's "Rotating the push key" block, as a user copies them."""
    page = (ROOT / "docs" / "operations.md").read_text()
    section = page.split("## Rotating the push key", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


@pytest.mark.slow  # three `numerator` processes and the edge's reads of the secret: 8 s
async def test_the_documented_rotation_refuses_no_push(aws_endpoint: str) -> None:
    """docs/operations.md, "Rotating the push key", run as written (each `sleep` is where the
    test waits for the edge's next read of the secret, PUSH_KEY_REFRESH_S=1): the new key put
    as AWSPENDING (edges accept it), then made AWSCURRENT (batchers sign with it; the old one,
    AWSPREVIOUS, still accepted), then the old one retired. A batcher that read the secret
    before a step and one that read it after are both accepted by an edge at every step, and
    the retired key is refused."""
    client = boto3.client("secretsmanager")
    arn = client.create_secret(Name=f"push-{uuid.uuid4().hex[:8]}", SecretString=new_key())["ARN"]
    env = {**os.environ, "PUSH_KEY_SECRET_ARN": arn}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    lines = rotation()
    assert [line.split()[:4] for line in lines[::2]] == [
        ["numerator", "aws", "push-key", step] for step in ("stage", "promote", "retire")
    ] and [line.split()[0] for line in lines[1::2]] == ["sleep", "sleep"], lines
    to = "127.0.0.1:4000"
    try:
        settings = Settings.of(push_key_secret_arn=arn, push_key_refresh_s=1.0).aws
        async with held(settings) as edge:
            assert edge is not None
            first = PushKeys(SecretKeys(arn).read())  # a process that read it at the start
            for line in lines:
                if line.startswith("sleep"):
                    await asyncio.sleep(2.5)  # the edge read the secret again
                    continue
                before = PushKeys(SecretKeys(arn).read())  # a process that read it just before
                command = ["bash", "-c", line]
                done = await asyncio.to_thread(
                    subprocess.run, command, env=env, capture_output=True, text=True
                )
                assert done.returncode == 0, done.stderr
                print(done.stdout.strip())
                after = PushKeys(SecretKeys(arn).read())  # and one that read it just after
                if "retire" not in line:  # each accepts what the other signs
                    both = [
                        before.opened(to, after.sign(to, b"r")),
                        after.opened(to, before.sign(to, b"r")),
                    ]
                    assert both == [b"r", b"r"], (line, before.ids, after.ids)
            # the old key refused, the new one taken, by a process that follows the secret
            await until(lambda: edge.opened(to, first.sign(to, b"x")) is None, within=5)
            assert edge.opened(to, after.sign(to, b"r")) == b"r"
            assert after.ids[0] != first.ids[0] and len(edge.ids) == 1
    finally:
        client.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)


def test_a_rotation_step_out_of_order_is_refused_in_one_sentence(aws_endpoint: str) -> None:
    client = boto3.client("secretsmanager")
    arn = client.create_secret(Name=f"push-{uuid.uuid4().hex[:8]}", SecretString=new_key())["ARN"]
    try:
        with pytest.raises(Refused, match="no AWSPENDING version: run `numerator aws push-key"):
            pushkey.promote(client, arn)
        with pytest.raises(Refused, match="no AWSPREVIOUS version: nothing to retire"):
            pushkey.retire(client, arn)
        assert "AWSPENDING" in pushkey.stage(client, arn)
        assert "AWSCURRENT" in pushkey.promote(client, arn)
        assert "retired" in pushkey.retire(client, arn)
        assert set(pushkey.staged(client, arn)) == {"AWSCURRENT"}
    finally:
        client.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
