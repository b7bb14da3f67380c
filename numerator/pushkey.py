"""`numerator aws push-key stage|promote|retire`: the push key's rotation, by the version stages
of its Secrets Manager secret (PUSH_KEY_SECRET_ARN; infra/adapters/pushkeys.py reads them).

stage: a new key as AWSPENDING, which every edge and batcher accepts once it has read the secret
again (PUSH_KEY_REFRESH_S) and none signs with yet; promote: AWSCURRENT moved to it, so the
batchers sign with it as they read it, while the old key, now AWSPREVIOUS, is still accepted;
retire: the old key's AWSPREVIOUS removed, so nobody accepts it. Between the steps wait
PUSH_KEY_REFRESH_S (docs/operations.md, "Rotating the push key"): a push is then never refused.
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from infra.adapters.pushkeys import PushKeys, new_key
from infra.errors import Refused


def staged(client: Any, arn: str) -> dict[str, str]:
    """Each stage of the secret: the version that carries it."""
    listed = client.list_secret_version_ids(SecretId=arn, MaxResults=100)
    return {
        stage: version["VersionId"]
        for version in listed.get("Versions", [])
        for stage in version.get("VersionStages", [])
    }


def stage(client: Any, arn: str) -> str:
    key = new_key()
    client.put_secret_value(
        SecretId=arn,
        SecretString=key,
        ClientRequestToken=str(uuid.uuid4()),
        VersionStages=["AWSPENDING"],
    )
    return (
        f"a new push key (id {PushKeys([key.encode()]).ids[0]}) is AWSPENDING: accepted by every "
        "process once it has read the secret again (PUSH_KEY_REFRESH_S); then run promote"
    )


def promote(client: Any, arn: str) -> str:
    stages = staged(client, arn)
    pending = stages.get("AWSPENDING")
    if pending is None:
        raise Refused("the secret has no AWSPENDING version: run `numerator aws push-key stage`")
    client.update_secret_version_stage(
        SecretId=arn,
        VersionStage="AWSCURRENT",
        MoveToVersionId=pending,
        RemoveFromVersionId=stages["AWSCURRENT"],
    )
    client.update_secret_version_stage(
        SecretId=arn, VersionStage="AWSPENDING", RemoveFromVersionId=pending
    )
    return (
        "the new push key is AWSCURRENT (batchers sign with it as they read it), the old one "
        "AWSPREVIOUS (still accepted); after PUSH_KEY_REFRESH_S run retire"
    )


def retire(client: Any, arn: str) -> str:
    previous = staged(client, arn).get("AWSPREVIOUS")
    if previous is None:
        raise Refused("the secret has no AWSPREVIOUS version: nothing to retire")
    client.update_secret_version_stage(
        SecretId=arn, VersionStage="AWSPREVIOUS", RemoveFromVersionId=previous
    )
    return "the old push key is retired: a datagram it signs is refused"


STEPS = {"stage": stage, "promote": promote, "retire": retire}


def run(args: argparse.Namespace) -> None:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from infra.run.process import aws_init_env

    aws = aws_init_env(args.endpoint)
    try:
        client = boto3.session.Session(
            aws_access_key_id=aws.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=aws.get("AWS_SECRET_ACCESS_KEY"),
            region_name=aws.get("AWS_DEFAULT_REGION"),
        ).client("secretsmanager", endpoint_url=aws.get("AWS_ENDPOINT_URL"))
        print(STEPS[args.step](client, args.secret))
    except (BotoCoreError, ClientError) as exc:
        raise Refused(f"the push key secret {args.secret}: {exc}") from exc
