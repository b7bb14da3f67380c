"""A Lambda container's cold start pays only for what its first request uses: importing the
handler and answering a request that needs neither AWS nor Postgres (a 422) loads no boto3, no
botocore client machinery and no psycopg; the first /next makes the AWS clients. (The times are
measured by `python -m bench.coldstart --image`, docs/performance.md, not here.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.adapters.aws import clients
from infra.errors import SettingsError
from infra.run.process import stand_in_aws
from infra.settings import Settings

ROOT = Path(__file__).parents[2]
HEAVY = ("boto3", "botocore.config", "botocore.client", "psycopg")
PROBE = f"""
import json, sys
import functions.handler as entry
imported = sorted(m for m in {HEAVY!r} if m in sys.modules)

class Context:
    aws_request_id = "cold"
    function_name = "numerator-edge"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:numerator-edge"
    def get_remaining_time_in_millis(self):
        return 10000

event = json.loads(sys.stdin.read())
status = entry.handler(event, Context())["statusCode"]
answered = sorted(m for m in {HEAVY!r} if m in sys.modules)
print(json.dumps({{"imported": imported, "answered": answered, "status": status}}))
"""


def test_import_and_a_first_answer_load_no_aws_client_and_no_postgres_driver() -> None:
    env = {**os.environ, "MODE": "aws", "AUTH": "none", "AUTHORIZER": "iam", **stand_in_aws()}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        input=(ROOT / "events" / "http-api-next-bad-count.json").read_text(),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["status"] == 422
    assert said["imported"] == [] and said["answered"] == [], said


def test_the_clients_are_made_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in stand_in_aws().items():
        monkeypatch.setenv(name, value)
    made = clients(Settings.from_env({}))
    assert made.kinesis._make is not None and made.dynamodb._make is not None
    assert made.kinesis.meta.service_model.service_name == "kinesis"
    assert made.kinesis._make is None and made.dynamodb._make is not None


def test_without_a_region_anywhere_they_are_made_at_once_and_say_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(SettingsError, match="no AWS region"):
        clients(Settings.from_env({}))
