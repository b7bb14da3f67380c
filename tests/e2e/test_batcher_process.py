"""`numerator batcher` and `numerator aws init` as a user runs them: the batcher alone, with its
/healthz and /metrics, stopped by SIGTERM (leases released at once); clear errors for a missing
stream, the wrong mode, and a missing moto."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import httpx
import psycopg
import pytest

from infra.run.server import free_port
from infra.settings import Settings

pytestmark = pytest.mark.slow


def numerator(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "numerator", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=timeout,
    )


def environment(settings: Settings) -> dict[str, str]:
    return {k: v for k, v in settings.to_env().items() if v}


def test_aws_init_creates_the_stream_and_table_once(aws: tuple[Settings, Any]) -> None:
    settings, found = aws
    env = {**environment(settings), "STREAM_NAME": settings.aws.stream_name + "-x", "SHARDS": "2"}
    first = numerator("aws", "init", env=env)
    assert first.returncode == 0, first.stderr
    assert "created" in first.stdout
    again = numerator("aws", "init", env=env)
    assert again.returncode == 0 and "both exist" in again.stdout
    shards = found.kinesis.list_shards(StreamName=settings.aws.stream_name + "-x")["Shards"]
    assert len(shards) == 2
    found.kinesis.delete_stream(StreamName=settings.aws.stream_name + "-x")


def test_aws_init_at_an_endpoint_needs_no_region_or_credentials(
    aws: tuple[Settings, Any], aws_endpoint: str, tmp_path: Any
) -> None:
    """docs/aws.md's `numerator aws init --endpoint URL` as a new user runs it: no AWS variables
    and no ~/.aws (a stand-in takes any region and credentials)."""
    settings, found = aws
    stream = settings.aws.stream_name + "-bare"
    bare = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env = {**bare, "HOME": str(tmp_path), "STREAM_NAME": stream}
    made = subprocess.run(
        [sys.executable, "-m", "numerator", "aws", "init", "--endpoint", aws_endpoint],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert made.returncode == 0 and "created" in made.stdout, made.stderr
    assert found.kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    found.kinesis.delete_stream(StreamName=stream)


def test_the_batcher_serves_health_and_releases_its_lease_on_sigterm(
    aws: tuple[Settings, Any], database_url: str
) -> None:
    settings, _ = aws
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "numerator", "batcher", "--port", str(port)],
        env={**os.environ, **environment(settings)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert httpx.get(url + "/healthz", timeout=5).json()["status"] == "ok"
        metrics = httpx.get(url + "/metrics", timeout=5).text
        assert 'role="batcher"' in metrics and "numerator_aws_calls_total" in metrics
        assert httpx.get(url + "/nothing", timeout=5).status_code == 404
        with psycopg.connect(database_url) as conn:
            held = conn.execute(
                "SELECT count(*) FROM leases WHERE stream LIKE %s AND expires_at > now()",
                (settings.aws.stream_name + "@%",),
            ).fetchone()
        assert held == (1,)
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, out
    assert "numerator batcher stopped" in out
    with psycopg.connect(database_url) as conn:
        held = conn.execute(
            "SELECT count(*) FROM leases WHERE stream LIKE %s AND expires_at > now()",
            (settings.aws.stream_name + "@%",),
        ).fetchone()
    assert held == (0,)  # released: the next batcher takes the shard at once


def test_the_batcher_names_a_missing_stream_and_how_to_make_it(
    aws: tuple[Settings, Any],
) -> None:
    settings, _ = aws
    env = {**environment(settings), "STREAM_NAME": "no-such-stream"}
    done = numerator("batcher", "--port", str(free_port()), env=env)
    assert done.returncode == 1
    assert "no Kinesis stream named 'no-such-stream'" in done.stderr
    assert "numerator aws init" in done.stderr


def test_the_batcher_refuses_the_embedded_mode(database_url: str) -> None:
    done = numerator("batcher", env={"MODE": "embedded", "DATABASE_URL": database_url})
    assert done.returncode == 1 and "MODE=aws" in done.stderr


def test_up_aws_moto_says_what_to_install_when_moto_is_missing() -> None:
    code = (
        "import sys; sys.modules['moto'] = None; sys.modules['moto.server'] = None;"
        "from numerator.cli import main;"
        f"main(['up', '--aws', 'moto', '--ephemeral', '--port', '{free_port()}'])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "pip install 'numerator[aws-local]'" in done.stderr


def test_migrate_is_a_one_off_task_that_can_run_again(database_url: str) -> None:
    done = numerator("migrate", "--database-url", database_url, env={})
    assert done.returncode == 0, done.stderr
    assert "the schema is current: migrations 1 to" in done.stdout
    again = numerator("migrate", env={"DATABASE_URL": database_url})
    assert again.returncode == 0, again.stderr
    missing = numerator("migrate", env={"DATABASE_URL": "", "DATABASE_SECRET_ARN": ""})
    assert missing.returncode == 1 and "DATABASE_SECRET_ARN" in missing.stderr
