"""The deployment, as far as it runs without Docker or AWS: `sam build` for the deployed runtime
(Python 3.12), the built function answering API Gateway events from its build folder alone, and
the transformed template deployed to moto's CloudFormation with that build as its code.

moto's CloudFormation skips API Gateway v2 resources and a table's TTL without an error: the test
makes those by direct calls with the template's properties instead, and does not count them as
deployed by the stack."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from infra.run.process import runtime_python
from infra.settings import Settings
from tests.cfn import FARGATE, ROOT, TEMPLATE, template, variant
from tests.lambdas import environment, event

pytestmark = pytest.mark.slow


PY312 = runtime_python()
needs_312 = pytest.mark.skipif(
    PY312 is None, reason="sam build for the deployed runtime needs a python3.12 interpreter"
)


def sam_build(out: Path, *overrides: str) -> None:
    assert PY312 is not None
    env = {
        **os.environ,
        "SAM_CLI_TELEMETRY": "0",
        "PATH": f"{PY312.parent}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "sam"),
            "build",
            "--template-file",
            str(TEMPLATE),
            "--build-dir",
            str(out),
            *(("--parameter-overrides", *overrides) if overrides else ()),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`sam build` of the edge for x86_64 (this machine's CPU), so that it can be imported here."""
    out = tmp_path_factory.mktemp("sam") / "build"
    sam_build(out, "Architecture=x86_64")
    yield out / "EdgeFunction"


@needs_312
def test_sam_build_makes_the_deployed_arm64_function(tmp_path: Path) -> None:
    """The template as deployed (arm64, Python 3.12): its compiled dependencies are aarch64."""
    sam_build(tmp_path / "build")
    function = tmp_path / "build" / "EdgeFunction"
    assert (function / "functions" / "handler.py").exists()
    (library,) = (function / "orjson").glob("orjson.cpython-312-*.so")
    machine = int.from_bytes(library.read_bytes()[18:20], "little")  # ELF e_machine
    assert machine == 183, f"{library.name}: ELF machine {machine}, not AArch64 (183)"


@needs_312
def test_the_built_function_answers_events_from_its_build_folder_alone(
    built: Path,
    batcher: Settings,
    name: str,
    tmp_path: Path,
) -> None:
    assert PY312 is not None
    files = []
    for file in ("http-api-create.json", "http-api-next.json"):
        files.append(tmp_path / file)
        files[-1].write_text(json.dumps(event(file, name)))
    invoke = [sys.executable, "-m", "numerator", "invoke", "--build", str(built)]
    done = subprocess.run(  # the documented command: numerator invoke --build
        [*invoke, "--python", str(PY312), *map(str, files)],
        env={**os.environ, **environment(batcher)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert [a["statusCode"] for a in answers] == [201, 200], answers
    assert "granian" not in os.listdir(built) and "pgserver" not in os.listdir(built)
    # the edge alone (template.yaml's CodeUri is edge/): none of the project's other folders
    ours = {"functions", "infra", "batcher", "numerator", "bench", "tests", "docs", "scripts"}
    assert ours & set(os.listdir(built)) == {"functions", "infra"}


def packaged(code: str) -> dict[str, Any]:
    from samtranslator.translator.transform import transform

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    source = template()
    source["Resources"]["EdgeFunction"]["Properties"]["CodeUri"] = code
    out: dict[str, Any] = transform(source, {}, NoManagedPolicies())  # type: ignore[arg-type]
    return out


def deploy(
    session: boto3.session.Session, stack: str, body: dict[str, Any], given: dict[str, str]
) -> dict[str, str]:
    """`body` deployed to moto's CloudFormation as `stack` in a VPC of its own, with the
    parameters `given` besides those every variant needs; its resources' physical ids."""
    ec2 = session.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.9.{i}.0/24", AvailabilityZone=zone)["Subnet"][
            "SubnetId"
        ]
        for i, zone in ((1, f"{session.region_name}a"), (2, f"{session.region_name}b"))
    ]
    secret = session.client("secretsmanager").create_secret(
        Name=f"{stack}-db", SecretString="postgresql://u:p@db:5432/numerator"
    )["ARN"]
    parameters = {
        "VpcId": vpc,
        "SubnetIds": ",".join(subnets),
        "BatcherImage": "numerator:test",
        "DatabaseSecretArn": secret,
        **given,
    }
    cloudformation = session.client("cloudformation")
    cloudformation.create_stack(
        StackName=stack,
        TemplateBody=json.dumps(body),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    deadline = time.monotonic() + 120
    while True:
        status = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
        if not status.endswith("IN_PROGRESS") or time.monotonic() > deadline:
            break
        time.sleep(1)
    events = cloudformation.describe_stack_events(StackName=stack)["StackEvents"]
    failures = [e for e in events if e.get("ResourceStatus", "").endswith("FAILED")]
    assert status == "CREATE_COMPLETE", (status, failures[:5])
    return {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cloudformation.list_stack_resources(StackName=stack)["StackResourceSummaries"]
    }


@needs_312
# moto warns of each resource type its CloudFormation skips (API Gateway v2, alarms); the suite
# turns warnings into errors, which in moto server's thread would be a 500.
@pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning")
def test_the_template_deploys_to_moto_cloudformation(
    built: Path, aws: tuple[Settings, Any]
) -> None:
    session = boto3.session.Session()
    s3 = session.client("s3")
    suffix = uuid.uuid4().hex[:8]
    bucket = f"numerator-code-{suffix}"
    s3.create_bucket(Bucket=bucket)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for path in built.rglob("*"):
            if path.is_file():
                out.write(path, path.relative_to(built))
    s3.put_object(Bucket=bucket, Key="edge.zip", Body=archive.getvalue())
    stack = f"numerator-{suffix}"
    body_of_stack = packaged(f"s3://{bucket}/edge.zip")
    made = deploy(session, stack, body_of_stack, {})
    kinesis, dynamodb = session.client("kinesis"), session.client("dynamodb")
    stream = kinesis.describe_stream_summary(StreamName=made["Stream"])
    assert stream["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE"
    table = dynamodb.describe_table(TableName=made["ReplyTable"])["Table"]
    assert table["KeySchema"] == [
        {"AttributeName": "k", "KeyType": "HASH"},
        {"AttributeName": "f", "KeyType": "RANGE"},
    ]
    # the audit chains' heads (issue 29): moto's CloudFormation makes the bucket but does not
    # apply its ObjectLockConfiguration; tests/unit/test_template.py checks the template's, and
    # tests/integration/test_anchors.py the lock on a bucket made with it
    s3.head_bucket(Bucket=made["AnchorBucket"])
    function = session.client("lambda").get_function(FunctionName=made["EdgeFunction"])
    configuration = function["Configuration"]
    assert configuration["Handler"] == "functions.handler.handler"
    assert configuration["Runtime"] == "python3.12"
    assert configuration["Environment"]["Variables"]["STREAM_NAME"] == made["Stream"]
    ecs = session.client("ecs")
    services = ecs.list_services(cluster=made["Cluster"])["serviceArns"]
    assert len(services) == 1
    # Not deployed by moto's CloudFormation: made here by direct calls, with the template's
    # properties, to show they are accepted as written.
    ttl = template()["Resources"]["ReplyTable"]["Properties"]["TimeToLiveSpecification"]
    dynamodb.update_time_to_live(
        TableName=made["ReplyTable"],
        TimeToLiveSpecification={"Enabled": ttl["Enabled"], "AttributeName": ttl["AttributeName"]},
    )
    described = dynamodb.describe_time_to_live(TableName=made["ReplyTable"])
    assert described["TimeToLiveDescription"]["AttributeName"] == "x"
    cloudwatch = session.client("cloudwatch")
    body = cloudwatch.get_dashboard(DashboardName=stack)["DashboardBody"]
    assert made["Stream"] in body and made["ReplyTable"] in body and made["EdgeFunction"] in body
    assert len(json.loads(body)["widgets"]) >= 8
    # The burn-rate alarms (not deployed by moto's CloudFormation) put with the template's
    # properties: moto accepts them as written. (Its PutCompositeAlarm answers 500 to a call
    # that only names a rule; the composites' rules are checked in tests/unit/test_template.py.)
    resources = variant(template(), {})["Resources"]
    for composite in ("AvailabilityBurnFast", "AvailabilityBurnSlow"):
        rule = resources[composite]["Properties"]["AlarmRule"]["Fn::Sub"]
        for part in re.findall(r"\$\{(\w+)\}", rule):
            alarm = resources[part]["Properties"]
            cloudwatch.put_metric_alarm(
                AlarmName=f"{stack}-{part}",
                AlarmDescription=alarm["AlarmDescription"],
                EvaluationPeriods=alarm["EvaluationPeriods"],
                Threshold=alarm["Threshold"],
                ComparisonOperator=alarm["ComparisonOperator"],
                TreatMissingData=alarm["TreatMissingData"],
                Metrics=alarm["Metrics"],
            )
    alarms = cloudwatch.describe_alarms(AlarmNamePrefix=stack)["MetricAlarms"]
    assert len(alarms) == 4 and all(len(a["Metrics"]) == 3 for a in alarms)
    # The HTTP API (its OpenAPI body in the transformed template; moto's CloudFormation skips
    # it and moto's import_api ignores its security): its route made by direct calls with the
    # body's integration and, for the default Authorizer, its sigv4 security as AWS_IAM.
    body = variant(body_of_stack, {})["Resources"]["Api"]["Properties"]["Body"]
    any_method = body["paths"]["$default"]["x-amazon-apigateway-any-method"]
    proxy = any_method["x-amazon-apigateway-integration"]
    assert any_method["security"] == [{"sigv4": []}]
    api = session.client("apigatewayv2")
    made_api = api.create_api(Name=stack, ProtocolType="HTTP")["ApiId"]
    integration = api.create_integration(
        ApiId=made_api,
        IntegrationType=proxy["type"].upper(),
        IntegrationUri=configuration["FunctionArn"],
        PayloadFormatVersion=proxy["payloadFormatVersion"],
        TimeoutInMillis=proxy["timeoutInMillis"],
    )["IntegrationId"]
    route = api.create_route(
        ApiId=made_api,
        RouteKey="$default",
        Target=f"integrations/{integration}",
        AuthorizationType="AWS_IAM",
    )
    assert route["RouteKey"] == "$default"
    session.client("cloudformation").delete_stack(StackName=stack)


def track(
    scaling: Any,
    resources: dict[str, Any],
    names: tuple[str, str],
    resource_id: str,
    capacity: tuple[int, int],
    aim: float | None = None,
) -> None:
    """A scaling target and its target-tracking policy (`names`: the template's resources)
    registered by direct calls with the template's properties, `aim` in place of a parameter's."""
    target = resources[names[0]]["Properties"]
    where = {
        "ServiceNamespace": target["ServiceNamespace"],
        "ResourceId": resource_id,
        "ScalableDimension": target["ScalableDimension"],
    }
    scaling.register_scalable_target(**where, MinCapacity=capacity[0], MaxCapacity=capacity[1])
    policy = resources[names[1]]["Properties"]
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    if aim is not None:
        tracking = {**tracking, "TargetValue": aim}
    scaling.put_scaling_policy(
        PolicyName=f"{resource_id.replace('/', '-')}-{names[1]}",
        **where,
        PolicyType=policy["PolicyType"],
        TargetTrackingScalingPolicyConfiguration=tracking,
    )


# moto's CloudFormation skips the scaling target and policy, the alarms and API Gateway v2
@pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning")
def test_the_fargate_edge_deploys_to_moto_cloudformation(aws: tuple[Settings, Any]) -> None:
    """Edge=fargate: the load balancer with its HTTPS listener and /healthz target group, the
    edge service beside the batchers', no function and no HTTP API; the CPU target tracking
    made by direct calls with the template's properties (moto's CloudFormation skips it)."""
    session = boto3.session.Session()
    certificate = session.client("acm").request_certificate(DomainName="numbers.example.com")
    stack = f"numerator-{uuid.uuid4().hex[:8]}"
    given = {**FARGATE, "CertificateArn": certificate["CertificateArn"]}
    given |= {"ReplyTableMode": "PROVISIONED", "ReplyWriteUnits": "7", "ReplyReadUnits": "5"}
    made = deploy(session, stack, packaged("s3://numerator/edge.zip"), given)
    assert "EdgeFunction" not in made and "Api" not in made
    table = session.client("dynamodb").describe_table(TableName=made["ReplyTable"])["Table"]
    assert table["BillingModeSummary"]["BillingMode"] == "PROVISIONED"
    throughput = table["ProvisionedThroughput"]
    assert (throughput["WriteCapacityUnits"], throughput["ReadCapacityUnits"]) == (7, 5)
    elb = session.client("elbv2")
    balancer = elb.describe_load_balancers(LoadBalancerArns=[made["Balancer"]])
    assert balancer["LoadBalancers"][0]["Scheme"] == "internet-facing"
    listeners = elb.describe_listeners(LoadBalancerArn=made["Balancer"])["Listeners"]
    https = next(item for item in listeners if item["Port"] == 443)
    assert https["Protocol"] == "HTTPS"
    assert https["Certificates"][0]["CertificateArn"] == certificate["CertificateArn"]
    group = elb.describe_target_groups(TargetGroupArns=[made["EdgeTargets"]])["TargetGroups"][0]
    assert (group["HealthCheckPath"], group["Port"], group["TargetType"]) == (
        "/healthz",
        8080,
        "ip",
    )
    ecs = session.client("ecs")
    services = ecs.describe_services(
        cluster=made["Cluster"], services=[made["EdgeService"], made["BatcherService"]]
    )["services"]
    assert len(services) == 2
    edge = ecs.describe_task_definition(taskDefinition=services[0]["taskDefinition"])
    container = edge["taskDefinition"]["containerDefinitions"][0]
    assert container["command"][:2] == ["serve", "--aws"]
    assert {"name": "AUTH", "value": "keys"} in container["environment"]
    resources = variant(template(), given)["Resources"]
    scaling = session.client("application-autoscaling")
    resource_id = f"service/{made['Cluster']}/{services[0]['serviceName']}"
    track(scaling, resources, ("EdgeScaling", "EdgeCpuTracking"), resource_id, (2, 20), 60.0)
    policies = scaling.describe_scaling_policies(ServiceNamespace="ecs")["ScalingPolicies"]
    assert any(p["ResourceId"] == resource_id for p in policies)
    resource_id = f"table/{made['ReplyTable']}"
    for kind in ("Write", "Read"):  # the provisioned reply table's, likewise
        least = int(given[resources[f"Reply{kind}Scaling"]["Properties"]["MinCapacity"]["Ref"]])
        names = (f"Reply{kind}Scaling", f"Reply{kind}Tracking")
        track(scaling, resources, names, resource_id, (least, 40_000))
    found = scaling.describe_scalable_targets(ServiceNamespace="dynamodb")["ScalableTargets"]
    assert {t["ScalableDimension"] for t in found if t["ResourceId"] == resource_id} == {
        "dynamodb:table:WriteCapacityUnits",
        "dynamodb:table:ReadCapacityUnits",
    }
    body = session.client("cloudwatch").get_dashboard(DashboardName=stack)["DashboardBody"]
    assert "AWS/ApplicationELB" in body and '"role", "server"' in body
    assert "AWS/Lambda" not in body
    session.client("cloudformation").delete_stack(StackName=stack)


def test_aws_init_makes_the_table_and_stream_the_template_defines(
    aws: tuple[Settings, Any],
) -> None:
    """`numerator aws init` (infra.adapters.aws.create, which made this test's stream and table) and
    template.yaml define the same reply table and stream: the third definition, LocalStack's
    hook, is compared with the template in tests/unit/test_template.py."""
    settings, found = aws
    resources = template()["Resources"]
    table = resources["ReplyTable"]["Properties"]
    made = found.dynamodb.describe_table(TableName=settings.aws.reply_table)["Table"]
    assert made["KeySchema"] == table["KeySchema"]
    assert made["AttributeDefinitions"] == table["AttributeDefinitions"]
    mode = template()["Parameters"]["ReplyTableMode"]["Default"]
    assert made["BillingModeSummary"]["BillingMode"] == mode  # table["BillingMode"] names it
    ttl = found.dynamodb.describe_time_to_live(TableName=settings.aws.reply_table)
    assert (
        ttl["TimeToLiveDescription"]["AttributeName"]
        == table["TimeToLiveSpecification"]["AttributeName"]
    )
    stream = found.kinesis.describe_stream_summary(StreamName=settings.aws.stream_name)
    summary = stream["StreamDescriptionSummary"]
    assert (
        summary["RetentionPeriodHours"] == resources["Stream"]["Properties"]["RetentionPeriodHours"]
    )
    assert summary["OpenShardCount"] == settings.aws.shards
