"""template.yaml, the Dockerfile and localstack/, checked offline: cfn-lint and `sam validate
--lint` pass, the SAM transform yields every resource the deployment needs, every environment
variable the template sets is one numerator reads (and every one it needs is set), the image runs
the batcher as a non-root user with a health check, and LocalStack's hook makes the stream and
the table as the template does."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.settings import VARIABLES, Settings
from tests.cfn import FARGATE, ROOT, TEMPLATE, dangling, template, transformed, variant

SETTINGS = set(VARIABLES)
BOTO3 = {"AWS_ENDPOINT_URL"}  # read by boto3 itself: empty means AWS's own endpoints
LAMBDA_ONLY = {"EdgeFunction", "Api", "ApiInvokes", "Api5xxAlarm"}
FARGATE_ONLY = {"Balancer", "HttpsListener", "EdgeTargets", "EdgeService", "EdgeCpuTracking"}


def tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@pytest.mark.slow  # cfn-lint loads its whole spec: 3-4 s
def test_cfn_lint_finds_nothing() -> None:
    done = subprocess.run(
        [tool("cfn-lint"), str(TEMPLATE)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow  # sam validate --lint: 6 s
def test_sam_validate_lint_passes() -> None:
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0", "AWS_DEFAULT_REGION": "us-east-1"}
    done = subprocess.run(
        [tool("sam"), "validate", "--lint", "--template-file", str(TEMPLATE)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is a valid SAM Template" in done.stdout + done.stderr


def test_the_sam_transform_yields_every_resource_of_the_deployment() -> None:
    out = transformed()
    kinds: dict[str, int] = {}
    for resource in out["Resources"].values():
        kinds[resource["Type"]] = kinds.get(resource["Type"], 0) + 1
    for kind in (
        "AWS::Lambda::Function",
        "AWS::IAM::Role",
        "AWS::ApiGatewayV2::Api",  # its route, integration and authorizer in its OpenAPI body
        "AWS::ApiGatewayV2::Stage",
        "AWS::Lambda::Permission",
        "AWS::Kinesis::Stream",
        "AWS::DynamoDB::Table",
        "AWS::ECS::Cluster",
        "AWS::ECS::TaskDefinition",
        "AWS::ECS::Service",
        "AWS::Logs::LogGroup",
        "AWS::RDS::DBInstance",
        "AWS::SecretsManager::Secret",
        "AWS::SecretsManager::SecretTargetAttachment",
    ):
        assert kind in kinds, f"no {kind} in the transformed template"
    # 4 on causes (and a 5xx one for each edge: Api5xxAlarm, Balancer5xxAlarm), 4 SLO windows,
    # 1 latency
    assert kinds["AWS::CloudWatch::Alarm"] == 10
    assert kinds["AWS::CloudWatch::CompositeAlarm"] == 2  # the two burn rates, both windows
    assert kinds["AWS::CloudWatch::Dashboard"] == 1
    function = out["Resources"]["EdgeFunction"]["Properties"]
    assert function["Handler"] == "functions.handler.handler"
    assert function["Runtime"] == "python3.12"
    assert function["Architectures"] == [{"Ref": "Architecture"}]
    assert template()["Parameters"]["Architecture"]["Default"] == "arm64"
    table = out["Resources"]["ReplyTable"]["Properties"]
    assert table["TimeToLiveSpecification"] == {"AttributeName": "x", "Enabled": True}
    assert set(out["Outputs"]) >= {"ApiUrl", "StreamName", "ReplyTableName"}


def test_the_edge_may_only_put_to_and_list_its_stream_and_read_its_table() -> None:
    out = transformed()
    role = out["Resources"]["EdgeFunctionRole"]["Properties"]
    actions: dict[str, Any] = {}
    for policy in role.get("Policies", []):
        for statement in policy["PolicyDocument"]["Statement"]:
            for action in statement["Action"]:
                actions[action] = statement["Resource"]
    assert actions.pop("kinesis:PutRecord") == {"Fn::GetAtt": ["Stream", "Arn"]}
    assert actions.pop("kinesis:PutRecords") == {"Fn::GetAtt": ["Stream", "Arn"]}
    # phased beats (READ_BEATS=phased): it lists the open shards to put on the one read next
    assert actions.pop("kinesis:ListShards") == {"Fn::GetAtt": ["Stream", "Arn"]}
    assert actions.pop("dynamodb:BatchGetItem") == {"Fn::GetAtt": ["ReplyTable", "Arn"]}
    assert actions.pop("secretsmanager:GetSecretValue")["Fn::If"][0] == "MakeDatabase"
    assert actions == {}, f"more than the edge needs: {actions}"
    managed = {str(arn).rsplit("/", 1)[-1] for arn in role.get("ManagedPolicyArns", [])}
    # SAM's own: logs, and the network interfaces of a function in a VPC
    assert managed <= {"AWSLambdaBasicExecutionRole", "AWSLambdaVPCAccessExecutionRole"}, managed


def test_the_lambda_edge_writes_no_log_line_per_invocation() -> None:
    """`numerator plan` bills no CloudWatch Logs per request (numerator/plan/cost.py): it holds
    only while Lambda's START/END/REPORT lines are left out (system logs at WARN, which needs the
    JSON format), and the function's log group is the one the template keeps 30 days."""
    function = transformed()["Resources"]["EdgeFunction"]["Properties"]
    assert function["LoggingConfig"] == {
        "LogFormat": "JSON",
        "SystemLogLevel": "WARN",
        "ApplicationLogLevel": "INFO",
    }


def variables() -> dict[str, dict[str, Any]]:
    """Per process, the environment the template gives it."""
    resources = template()["Resources"]
    edge = resources["EdgeFunction"]["Properties"]["Environment"]["Variables"]
    (container,) = resources["BatcherTask"]["Properties"]["ContainerDefinitions"]
    # every variable the batcher may be given: one set only in a variant is an Fn::If's branch
    items = [item.get("Fn::If", [None, item])[1] for item in container["Environment"]]
    batcher = {item["Name"]: item["Value"] for item in items}
    batcher.update({item["Name"]: item["ValueFrom"] for item in container["Secrets"]})
    return {"edge": dict(edge), "batcher": batcher}


def test_every_variable_the_template_sets_is_read_and_every_needed_one_is_set() -> None:
    given = variables()
    for process, env in given.items():
        unknown = set(env) - SETTINGS - BOTO3
        assert not unknown, f"{process}: set but never read: {unknown}"
        assert env["MODE"] == "aws"
        assert {"STREAM_NAME", "REPLY_TABLE"} <= set(env), process
    assert "DATABASE_SECRET_ARN" in given["edge"]  # read on the first counter route
    assert "DATABASE_URL" in given["batcher"]  # from the secret, by ECS


def test_the_template_defaults_are_numerator_defaults() -> None:
    parameters = template()["Parameters"]
    defaults = Settings.of()
    for parameter, variable in (
        ("ReplyTimeout", "REPLY_TIMEOUT_S"),
        ("BackFrameMs", "BACK_FRAME_MS"),
        ("FramePolicy", "FRAME_POLICY"),
        ("ReadIntervalMs", "READ_INTERVAL_MS"),
        ("LeaseTtl", "LEASE_TTL_S"),
        ("PartitionSpread", "PARTITION_SPREAD"),
        ("ReplyTtl", "REPLY_TTL_S"),
    ):
        group, field, _ = VARIABLES[variable]
        default = getattr(getattr(defaults, group), field)
        given = parameters[parameter]["Default"]
        assert (given == default) if isinstance(default, str) else float(given) == default, (
            parameter
        )
    assert parameters["EdgeTimeout"]["Default"] > parameters["ReplyTimeout"]["Default"]


def test_the_image_runs_the_batcher_as_a_non_root_user_with_a_health_check() -> None:
    lines = []
    for line in re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text()).splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line.strip())
    final = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM "))]
    stage = lines[lines.index(final) :]
    assert re.match(r"FROM python:3\.1[2-9]", final), final
    users = [line.split()[1] for line in stage if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), users
    (entry,) = [line for line in stage if line.startswith("ENTRYPOINT ")]
    (command,) = [line for line in stage if line.startswith("CMD ")]
    assert entry == 'ENTRYPOINT ["numerator"]'
    assert command.startswith('CMD ["batcher"') and '"8081"' in command
    (health,) = [line for line in stage if line.startswith("HEALTHCHECK ")]
    assert "http://127.0.0.1:8081/healthz" in health
    task = template()["Resources"]["BatcherTask"]["Properties"]["ContainerDefinitions"][0]
    assert task["PortMappings"] == [{"ContainerPort": 8081}]
    check = task["HealthCheck"]["Command"]  # ECS runs its own, not the image's
    assert check == ["CMD", *json.loads(health.split(" CMD ", 1)[1])]


def hook_calls() -> dict[str, list[str]]:
    """The awslocal calls of LocalStack's ready hook, by API: their arguments."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "localstack/ready.d/init.sh").read_text())
    calls: dict[str, list[str]] = {}
    for part in re.split(r"\|\||&&|\n", text):
        words = shlex.split(part, comments=True)
        if len(words) >= 3 and words[0] == "awslocal":
            calls[f"{words[1]} {words[2]}"] = words[3:]
    return calls


def test_localstack_makes_the_table_and_stream_the_template_defines() -> None:
    calls = hook_calls()
    table = template()["Resources"]["ReplyTable"]["Properties"]
    made = calls["dynamodb create-table"]
    defined = made[made.index("--attribute-definitions") + 1 : made.index("--key-schema")]
    assert defined == [
        f"AttributeName={a['AttributeName']},AttributeType={a['AttributeType']}"
        for a in table["AttributeDefinitions"]
    ]
    keys = made[made.index("--key-schema") + 1 : made.index("--billing-mode")]
    schema = table["KeySchema"]
    assert keys == [f"AttributeName={k['AttributeName']},KeyType={k['KeyType']}" for k in schema]
    assert table["BillingMode"] == {"Ref": "ReplyTableMode"}
    mode = template()["Parameters"]["ReplyTableMode"]["Default"]
    assert made[made.index("--billing-mode") + 1] == mode == "PAY_PER_REQUEST"
    ttl = calls["dynamodb update-time-to-live"]
    spec = ttl[ttl.index("--time-to-live-specification") + 1]
    assert spec == "Enabled=true,AttributeName={}".format(
        table["TimeToLiveSpecification"]["AttributeName"]
    )
    assert "kinesis create-stream" in calls
    assert "${SHARDS:-4}" in (ROOT / "localstack/ready.d/init.sh").read_text()
    assert Settings.of().aws.shards == 4, "the hook's default shard count is numerator's"
    assert template()["Parameters"]["ShardCount"]["Default"] == 4, "and the template's"


def test_localstack_env_sets_only_what_the_function_declares() -> None:
    """`sam local start-api --env-vars` ignores a variable the template does not declare."""
    env = json.loads((ROOT / "localstack/env.json").read_text())["EdgeFunction"]
    assert set(env) <= set(variables()["edge"])
    assert env["AWS_ENDPOINT_URL"] == "http://localstack:4566"


def test_the_functions_requirements_are_the_projects_own() -> None:
    """requirements.txt (what `sam build` installs for the edge) asks for nothing pyproject.toml
    does not, with the same lower bounds."""
    import tomllib

    def by_name(lines: list[str]) -> dict[str, str]:
        out = {}
        for line in lines:
            line = line.split("#")[0].split(";")[0].strip()
            if line:
                name = re.split(r"[\[<>=!~]", line, maxsplit=1)[0].lower()
                out[name] = line
        return out

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = by_name((ROOT / "edge" / "requirements.txt").read_text().splitlines())
    declared = by_name(project)
    assert wanted, "requirements.txt lists the edge's dependencies"
    for name, line in wanted.items():
        assert declared.get(name) == line, (name, line, declared.get(name))


def test_the_edge_checks_keys_exactly_when_api_gateway_does_not() -> None:
    """Authorizer=NONE: numerator's own keys (AUTH=keys); IAM or JWT: API Gateway checks
    callers, and the function is told so (AUTH=none with AUTHORIZER naming it), which it
    refuses to run without (Settings.open_to)."""
    parsed = template()
    assert parsed["Conditions"]["KeysAtEdge"] == {"Fn::Equals": [{"Ref": "Authorizer"}, "NONE"]}
    edge = variables()["edge"]
    assert edge["AUTH"] == {"Fn::If": ["KeysAtEdge", "keys", "none"]}
    assert edge["AUTHORIZER"] == {"Fn::If": ["KeysAtEdge", "", {"Ref": "Authorizer"}]}
    for authorizer in ("IAM", "JWT"):
        told = Settings.of(auth="none", authorizer=authorizer)
        assert told.open_to(None) is None
    assert Settings.of(auth="none").open_to(None) is not None


def dashboard_text(given: dict[str, str]) -> str:
    """The CloudWatch dashboard's body for these parameters, its variables put in (Role and
    the edge's widgets), its other ${...} references as written."""
    made = variant(template(), given)["Resources"]["Dashboard"]
    text, names = made["Properties"]["DashboardBody"]["Fn::Sub"]
    for name, value in names.items():
        text = text.replace(f"${{{name}}}", value["Fn::Sub"] if isinstance(value, dict) else value)
    return str(text)


def dashboard_body(given: dict[str, str]) -> dict[str, Any]:
    """The dashboard's body, its ${...} references filled with placeholders."""
    parsed: dict[str, Any] = json.loads(re.sub(r"\$\{[\w.:]+\}", "X", dashboard_text(given)))
    return parsed


@pytest.mark.parametrize(
    ("given", "edge"),
    [({}, {"AWS/ApiGateway", "AWS/Lambda"}), (FARGATE, {"AWS/ApplicationELB"})],
    ids=["lambda", "fargate"],
)
def test_the_cloudwatch_dashboard_covers_every_tier_and_names_only_metrics_numerator_writes(
    given: dict[str, str], edge: set[str]
) -> None:
    from infra.observe.emf import COUNTS, STATUSES

    widgets = dashboard_body(given)["widgets"]
    lines = [m for w in widgets for m in w["properties"]["metrics"]]
    namespaces = {m[0] for m in lines}
    assert namespaces == {"numerator", "AWS/Kinesis", "AWS/DynamoDB", "AWS/ECS", *edge}
    names = {m[1] for m in lines}
    for wanted in ("GetRecords.IteratorAgeMilliseconds", "ThrottledRequests", "CPUUtilization"):
        assert wanted in names
    written = {*COUNTS.values(), *STATUSES.values(), "ServerErrors", "AwsThrottles", "LagSeconds"}
    assert {m[1] for m in lines if m[0] == "numerator"} <= written
    roles = {m[5] for m in lines if m[0] == "numerator"}
    assert roles == {"batcher", "server" if given else "lambda"}
    referenced = {m.split(".")[0] for m in re.findall(r"\$\{([\w.]+)", dashboard_text(given))}
    made = variant(template(), given)["Resources"]
    assert referenced - {"AWS"} <= set(made), "a ${…} names no resource this edge makes"


def test_the_slo_alarms_burn_on_two_windows_and_notify_only_a_topic_given() -> None:
    resources = template()["Resources"]
    for composite, parts, factor in (
        ("AvailabilityBurnFast", ("AvailabilityBurn1h", "AvailabilityBurn5m"), 14.4),
        ("AvailabilityBurnSlow", ("AvailabilityBurn6h", "AvailabilityBurn30m"), 6),
    ):
        properties = resources[composite]["Properties"]
        rule = properties["AlarmRule"]["Fn::Sub"]
        assert rule == f'ALARM("${{{parts[0]}}}") AND ALARM("${{{parts[1]}}}")'
        assert properties["AlarmActions"] == {
            "Fn::If": ["Notify", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
        }
        for part in parts:
            alarm = resources[part]["Properties"]
            assert alarm["Threshold"] == round(factor * 0.1, 6), part
            windows = {m["MetricStat"]["Period"] for m in alarm["Metrics"] if "MetricStat" in m}
            assert len(windows) == 1
    assert template()["Conditions"]["Notify"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]
    }


@pytest.mark.parametrize("given", [{}, FARGATE], ids=["lambda", "fargate"])
def test_each_edge_variant_makes_its_edge_and_refers_to_nothing_it_does_not_make(
    given: dict[str, str],
) -> None:
    """Both values of Edge, on the SAM transform's output (the offline transform) and on the
    template: every Ref, GetAtt and ${…} of the resources made names one that is made."""
    for source in (transformed(), template()):
        made = variant(source, given)
        assert dangling(source, made) == set(), given
        resources = set(made["Resources"])
        mine, others = (
            (LAMBDA_ONLY, FARGATE_ONLY) if "Edge" not in given else (FARGATE_ONLY, LAMBDA_ONLY)
        )
        assert mine <= resources and not others & resources, resources
        for shared in ("Stream", "ReplyTable", "BatcherService", "LatencyAlarm", "Dashboard"):
            assert shared in resources


def test_the_fargate_edge_serves_https_checks_healthz_scales_on_cpu_and_checks_keys() -> None:
    made = variant(template(), FARGATE)["Resources"]
    listener = made["HttpsListener"]["Properties"]
    assert (listener["Protocol"], listener["Port"]) == ("HTTPS", 443)
    assert listener["Certificates"] == [{"CertificateArn": {"Ref": "CertificateArn"}}]
    redirect = made["HttpListener"]["Properties"]["DefaultActions"][0]
    assert redirect["RedirectConfig"]["Protocol"] == "HTTPS"
    targets = made["EdgeTargets"]["Properties"]
    assert (targets["HealthCheckPath"], targets["Port"], targets["TargetType"]) == (
        "/healthz",
        8080,
        "ip",
    )
    tracking = made["EdgeCpuTracking"]["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "ECSServiceAverageCPUUtilization"
    }
    assert tracking["TargetValue"] == {"Ref": "EdgeCpuTarget"}
    container = made["EdgeTask"]["Properties"]["ContainerDefinitions"][0]
    assert container["Command"][:2] == ["serve", "--aws"] and "8080" in container["Command"]
    env = {item["Name"]: item["Value"] for item in container["Environment"]}
    assert env["AUTH"] == "keys" and env["MODE"] == "aws"
    assert set(env) <= SETTINGS | BOTO3, set(env) - SETTINGS
    assert [s["Name"] for s in container["Secrets"]] == ["DATABASE_URL"]
    role = made["EdgeTaskRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    actions = {action for statement in role for action in statement["Action"]}
    assert actions == {
        "kinesis:PutRecord",
        "kinesis:PutRecords",
        "kinesis:DescribeStreamSummary",
        "kinesis:ListShards",
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
        "dynamodb:DescribeTable",
    }
    # the SLO alarms and the dashboard read the server edge's EMF lines and the balancer
    latency = made["LatencyAlarm"]["Properties"]
    assert (latency["Namespace"], latency["Threshold"]) == ("AWS/ApplicationELB", 0.25)
    burn = made["AvailabilityBurn5m"]["Properties"]["Metrics"][1]["MetricStat"]["Metric"]
    assert {"Name": "role", "Value": "server"} in burn["Dimensions"]


PUSH_KEY_ARN = {
    "Fn::Sub": "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:"
    "${AWS::StackName}-push-key-*"
}


@pytest.mark.parametrize("given", [{}, FARGATE], ids=["lambda", "fargate"])
def test_only_the_batchers_and_the_edge_tasks_can_read_the_push_key(given: dict[str, str]) -> None:
    """Replies pushed to the Fargate edge are signed with a key from a secret that the batchers
    and the edge tasks are given and may read (its stages listed, for a rotation), and nothing
    else: not the Lambda edge, which takes no pushes. Without the Fargate edge no key is made."""
    made = variant(template(), given)["Resources"]
    readers = set()
    for name, resource in made.items():
        properties = resource.get("Properties", {})
        policies = properties.get("Policies", [])
        if resource["Type"] == "AWS::IAM::Policy":  # a policy of its own: its role reads
            (role,) = properties["Roles"]
            name, policies = role["Ref"], [properties]
        for policy in policies:
            document = policy.get("PolicyDocument", policy)  # SAM's function: the statements
            for statement in document.get("Statement", []) if isinstance(document, dict) else []:
                if statement["Resource"] == PUSH_KEY_ARN:
                    assert set(statement["Action"]) == {
                        "secretsmanager:ListSecretVersionIds",
                        "secretsmanager:GetSecretValue",
                    }
                    readers.add(name)
    told = set()
    for task in ("BatcherTask", "EdgeTask"):
        for container in made.get(task, {}).get("Properties", {}).get("ContainerDefinitions", []):
            env = {item["Name"]: item["Value"] for item in container["Environment"]}
            if env.get("PUSH_KEY_SECRET_ARN") == {"Fn::Sub": "${AWS::StackName}-push-key"}:
                told.add(task)
    if not given:
        assert "PushKey" not in made and not readers and not told
        return
    assert made["PushKey"]["Properties"]["Name"] == {"Fn::Sub": "${AWS::StackName}-push-key"}
    secret = made["PushKey"]["Properties"]["GenerateSecretString"]
    assert secret["PasswordLength"] >= 32 and secret["ExcludePunctuation"] is True
    assert readers == {"BatcherTaskRole", "EdgeTaskRole"} and told == {"BatcherTask", "EdgeTask"}


def test_the_fargate_edge_needs_numerators_keys_and_a_certificate() -> None:
    rules = template()["Rules"]["FargateEdge"]
    assert rules["RuleCondition"] == {"Fn::Equals": [{"Ref": "Edge"}, "fargate"]}
    asserted = [a["Assert"] for a in rules["Assertions"]]
    assert {"Fn::Equals": [{"Ref": "Authorizer"}, "NONE"]} in asserted
    assert {"Fn::Not": [{"Fn::Equals": [{"Ref": "CertificateArn"}, ""]}]} in asserted


def test_the_anchor_bucket_locks_every_record_in_compliance_mode() -> None:
    """The audit chains' heads (issues 29, 51): every version kept, Object Lock in compliance
    mode for the retention chosen, the batchers may put and read back under heads/ and do
    nothing else (no delete, no retention change, no governance bypass), and are told where."""
    found = template()
    bucket = found["Resources"]["AnchorBucket"]
    assert bucket["DeletionPolicy"] == "Retain"
    assert bucket["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    lock = bucket["Properties"]["ObjectLockConfiguration"]
    assert bucket["Properties"]["ObjectLockEnabled"] is True
    assert lock["Rule"]["DefaultRetention"] == {
        "Mode": "COMPLIANCE",
        "Days": {"Ref": "AnchorRetentionDays"},
    }
    role = found["Resources"]["BatcherTaskRole"]["Properties"]["Policies"]
    (anchor,) = [p for p in role if p.get("PolicyName") == "anchor-heads"]  # one is an Fn::If
    allowed = {s["Action"]: s for s in anchor["PolicyDocument"]["Statement"]}
    assert sorted(allowed) == ["s3:GetObject", "s3:ListBucket", "s3:PutObject"]
    assert all(s["Effect"] == "Allow" for s in allowed.values())
    heads = {"Fn::Sub": "${AnchorBucket.Arn}/heads/*"}
    assert allowed["s3:PutObject"]["Resource"] == allowed["s3:GetObject"]["Resource"] == heads
    listed = allowed["s3:ListBucket"]
    assert listed["Condition"] == {"StringLike": {"s3:prefix": "heads/*"}}
    env = variables()["batcher"]
    assert env["ANCHOR_TO"] == {"Fn::Sub": "s3://${AnchorBucket}/heads/"}


def test_both_edges_and_their_batchers_read_on_phased_beats() -> None:
    """Edges and batchers must agree on READ_BEATS (docs/settings.md): either edge's lone
    records go to the shard read next, and the batchers read each shard at its own phase; the
    Fargate edge keeps the default, phased, as `numerator up` does for each edge."""
    from infra.settings import ReadBeats

    given = variables()
    assert given["edge"]["READ_BEATS"] == "phased" == str(Settings.of().aws.read_beats)
    assert given["batcher"]["READ_BEATS"] == "phased"
    fargate = template()["Resources"]["EdgeTask"]["Properties"]["ContainerDefinitions"][0]
    assert "READ_BEATS" not in {item["Name"] for item in fargate["Environment"]}
    assert Settings.of().aws.read_beats is ReadBeats.PHASED
    assert Settings.from_env({"READ_BEATS": "shared"}).aws.read_beats is ReadBeats.SHARED


def test_the_plan_prices_the_lambda_at_the_templates_memory() -> None:
    """`numerator plan` bills a Lambda's CPU at its memory's share of a vCPU, by default at
    EdgeMemory's default."""
    from numerator.plan.model import LAMBDA_MEMORY_MB, MEMORIES_MB

    default = template()["Parameters"]["EdgeMemory"]["Default"]
    assert default == LAMBDA_MEMORY_MB in MEMORIES_MB


def test_a_provisioned_reply_table_keeps_its_units_and_scales_above_them_at_the_plans_target() -> (
    None
):
    """ReplyTableMode=PROVISIONED (what `numerator plan` prints when it is cheaper): the units
    given, as the least auto scaling keeps, target tracking at the plan's REPLY_TARGET; on
    demand (the default), neither units nor scaling."""
    from numerator.plan.model import REPLY_TARGET

    given = {"ReplyTableMode": "PROVISIONED", "ReplyWriteUnits": "28567", "ReplyReadUnits": "9"}
    made = variant(template(), given)["Resources"]
    table = made["ReplyTable"]["Properties"]
    assert table["ProvisionedThroughput"] == {
        "ReadCapacityUnits": {"Ref": "ReplyReadUnits"},
        "WriteCapacityUnits": {"Ref": "ReplyWriteUnits"},
    }
    for kind, units in (("Write", "ReplyWriteUnits"), ("Read", "ReplyReadUnits")):
        target = made[f"Reply{kind}Scaling"]["Properties"]
        assert target["ScalableDimension"] == f"dynamodb:table:{kind}CapacityUnits"
        assert target["ResourceId"] == {"Fn::Sub": "table/${ReplyTable}"}
        assert (target["MinCapacity"], target["MaxCapacity"]) == (
            {"Ref": units},
            {"Ref": "ReplyMaxUnits"},
        )
        policy = made[f"Reply{kind}Tracking"]["Properties"]
        tracking = policy["TargetTrackingScalingPolicyConfiguration"]
        assert tracking["TargetValue"] == REPLY_TARGET * 100
        assert tracking["PredefinedMetricSpecification"] == {
            "PredefinedMetricType": f"DynamoDB{kind}CapacityUtilization"
        }
    assert dangling(template(), variant(template(), given)) == set()
    on_demand = variant(template(), {})["Resources"]
    assert "ProvisionedThroughput" not in on_demand["ReplyTable"]["Properties"]
    assert not {"ReplyWriteScaling", "ReplyReadScaling"} & set(on_demand)


@pytest.mark.parametrize(
    ("authorizer", "auth_type", "open_to_all"),
    [("IAM", "AWS_IAM", False), ("NONE", "NONE", True)],
)
def test_a_function_url_beside_the_api_signs_with_iam_or_leaves_the_check_to_numerators_keys(
    authorizer: str, auth_type: str, open_to_all: bool
) -> None:
    """FunctionUrl=true: a URL on the edge function (the same payload 2.0 as the HTTP API, no
    API Gateway charge), AWS_IAM with the IAM authorizer; with NONE, open, and the function
    checks numerator's keys (AUTH=keys), its resource policy granting both actions AWS asks
    of an open URL. Never with JWT: the rule refuses what would let requests in unchecked."""
    given = {"FunctionUrl": "true", "Authorizer": authorizer}
    for source in (transformed(), template()):
        made = variant(source, given)
        assert dangling(source, made) == set()
        resources = made["Resources"]
        url = resources["EdgeFunctionUrl"]["Properties"]
        assert url["AuthType"] == auth_type
        assert url["TargetFunctionArn"] == {"Fn::GetAtt": ["EdgeFunction", "Arn"]}
        assert "Api" in resources, "the HTTP API stays: sam local start-api serves it"
        granted = {
            r["Properties"]["Action"]
            for r in resources.values()
            if r["Type"] == "AWS::Lambda::Permission" and r["Properties"].get("Principal") == "*"
        }
        assert granted == (
            {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"} if open_to_all else set()
        )
        assert "EdgeUrl" in made["Outputs"]
    environment = variant(template(), given)["Resources"]["EdgeFunction"]["Properties"]
    auth = resolve_env(environment, given)
    assert auth == ("keys" if open_to_all else "none")
    plain = variant(template(), {})
    assert "EdgeFunctionUrl" not in plain["Resources"] and "EdgeUrl" not in plain["Outputs"]
    rule = template()["Rules"]["AFunctionUrl"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "FunctionUrl"}, "true"]}
    asserted = [a["Assert"] for a in rule["Assertions"]]
    assert {"Fn::Not": [{"Fn::Equals": [{"Ref": "Authorizer"}, "JWT"]}]} in asserted
    assert {"Fn::Equals": [{"Ref": "Edge"}, "lambda"]} in asserted


def resolve_env(function: dict[str, Any], given: dict[str, str]) -> str:
    """AUTH as the function gets it under `given` (KeysAtEdge: Authorizer=NONE)."""
    auth = function["Environment"]["Variables"]["AUTH"]
    if isinstance(auth, str):
        return auth
    condition, yes, no = auth["Fn::If"]
    assert condition == "KeysAtEdge"
    return str(yes if given.get("Authorizer", "IAM") == "NONE" else no)
