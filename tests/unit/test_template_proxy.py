"""template.yaml's `RdsProxy`: RDS Proxy in front of the database it makes, reached by every
process through DATABASE_HOST with DATABASE_POOLER=transaction; nothing of it otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from infra.settings import Settings
from tests.cfn import dangling, template, transformed, variant

PROXY = {"DatabaseProxy", "DatabaseProxyRole", "DatabaseProxyTargets", "DatabaseFromProxy"}
WITH_PROXY = {"CreateDatabase": "true", "RdsProxy": "true"}


def environments(made: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each process's environment in a variant: the Lambda edge's, the Fargate edge's and the
    batchers' (whichever the variant makes)."""
    resources = made["Resources"]
    out = {}
    if "EdgeFunction" in resources:
        out["lambda"] = resources["EdgeFunction"]["Properties"]["Environment"]["Variables"]
    for task in ("BatcherTask", "EdgeTask"):
        if task in resources:
            (container,) = resources[task]["Properties"]["ContainerDefinitions"]
            out[task] = {item["Name"]: item["Value"] for item in container["Environment"]}
    return out


@pytest.mark.parametrize("edge", ["lambda", "fargate"])
def test_rds_proxy_fronts_the_database_for_every_process(edge: str) -> None:
    given = {**WITH_PROXY, "Edge": edge, "Authorizer": "NONE", "CertificateArn": "arn:x"}
    for source in (transformed(), template()):
        made = variant(source, given)
        assert dangling(source, made) == set()
        assert set(made["Resources"]) >= PROXY
        envs = environments(made)
        assert len(envs) == 2, envs
        for process, env in envs.items():
            assert env["DATABASE_POOLER"] == "transaction", process
            assert env["DATABASE_HOST"] == {"Fn::GetAtt": ["DatabaseProxy", "Endpoint"]}, process
    resources = variant(template(), given)["Resources"]
    proxy = resources["DatabaseProxy"]["Properties"]
    assert proxy["EngineFamily"] == "POSTGRESQL"
    assert proxy["Auth"] == [
        {"AuthScheme": "SECRETS", "SecretArn": {"Ref": "DatabaseSecret"}, "IAMAuth": "DISABLED"}
    ]
    (policy,) = resources["DatabaseProxyRole"]["Properties"]["Policies"]
    (may,) = policy["PolicyDocument"]["Statement"]
    assert may["Action"] == "secretsmanager:GetSecretValue"  # that one secret, nothing else
    assert may["Resource"] == {"Ref": "DatabaseSecret"}
    targets = resources["DatabaseProxyTargets"]["Properties"]
    assert targets["DBInstanceIdentifiers"] == [{"Ref": "Database"}]
    # a request waits for a connection no longer than for its reply
    borrow = targets["ConnectionPoolConfigurationInfo"]["ConnectionBorrowTimeout"]
    assert borrow <= Settings.of().edge.reply_timeout_s


@pytest.mark.parametrize("given", [{}, {"CreateDatabase": "true"}], ids=["secret", "database"])
def test_without_rds_proxy_nothing_of_it_is_made(given: dict[str, str]) -> None:
    made = variant(template(), given)
    assert not PROXY & set(made["Resources"])
    for process, env in environments(made).items():
        assert env["DATABASE_POOLER"] == "none" and env["DATABASE_HOST"] == "", process


def test_rds_proxy_needs_the_database_the_template_makes() -> None:
    (assertion,) = template()["Rules"]["AProxy"]["Assertions"]
    assert assertion["Assert"] == {"Fn::Equals": [{"Ref": "CreateDatabase"}, "true"]}
