"""What a function in a `sam local` container talks to: `numerator up --aws moto` (moto server,
a batcher) on a Postgres, both relayed to the Docker bridge's address (a container's 127.0.0.1
is the container; moto and the embedded Postgres listen on loopback and a unix socket), the
database URL in a moto secret as the template's DATABASE_SECRET_ARN expects it, and the
--env-vars file that points the function there."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from infra.errors import NumeratorError
from infra.run.process import stand_in_aws, stop, wait_ready
from infra.run.server import free_port
from numerator.relay import Target, relay

SECRET = "numerator-database"
FUNCTION = "EdgeFunction"  # template.yaml's edge function, as `sam local invoke` names it
# The function polls its reply every 50 ms instead of 10: a container's reads of moto, through a
# relay, are what this machine's two cores spend most on.
LOCAL_ENV = {"READ_INTERVAL_MS": "50"}
UP_SAID = re.compile(r"moto server at (http://[\d.]+:\d+); stream (\S+) and table (\S+) ")


@dataclass(frozen=True)
class Stack:
    """The running `numerator up --aws moto` (its process, whose children are moto and the
    batcher), moto's endpoint as this machine reaches it, and the function's --env-vars file."""

    up: subprocess.Popen[str]
    endpoint: str
    env_vars: Path
    function_env: dict[str, str]


def bridge_gateway() -> str:
    """The host's address on Docker's default bridge, where a function container (which SAM
    leaves on the bridge even with `--docker-network host`) reaches the host: the network's
    gateway, or (Debian's docker.io names none) the address of its interface."""
    fields = "{{range .IPAM.Config}}{{.Gateway}}{{end}} {{index .Options $NAME}}".replace(
        "$NAME", '"com.docker.network.bridge.name"'
    )
    done = subprocess.run(
        ["docker", "network", "inspect", "bridge", "--format", fields],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise NumeratorError(f"docker has no bridge network: {done.stderr.strip()}")
    gateway, _, interface = done.stdout.strip().rpartition(" ")
    if gateway:
        return gateway
    shown = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", interface], capture_output=True, text=True, check=False
    )
    found = re.search(r"inet ([\d.]+)/", shown.stdout)
    if not found:
        raise NumeratorError(f"no IPv4 address on Docker's bridge ({interface}): is it up?")
    return found.group(1)


def postgres_at(url: str) -> Target:
    """Where the Postgres of `url` listens: its unix socket (pgserver's URLs name a folder in
    `host=`), or its host and port."""
    parts = urlsplit(url)
    folder = parse_qs(parts.query).get("host", [""])[0]
    port = parts.port or 5432
    if folder.startswith("/") or (not parts.hostname and not folder):
        return f"{folder or '/var/run/postgresql'}/.s.PGSQL.{port}"
    return (parts.hostname or folder, port)


def relayed_url(url: str, host: str, port: int) -> str:
    """The URL of the same database reached at host:port (a relay), its user, password and
    other parameters kept."""
    parts = urlsplit(url)
    user = parts.username or "postgres"
    if parts.password:
        user += f":{parts.password}"
    query = {k: v for k, v in parse_qs(parts.query).items() if k not in ("host", "port")}
    netloc = f"{user}@{host}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query, doseq=True), ""))


@contextmanager
def up_moto(database_url: str, log: IO[str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`numerator up --aws moto` on `database_url`, on a free loopback port; yields it and what
    it said once it answers. Its own session: Ctrl-C reaches `sam-local`, which stops it."""
    port = free_port()
    command = [sys.executable, "-m", "numerator", "up", "--aws", "moto", "--port", str(port)]
    env = {**os.environ, **stand_in_aws(), **LOCAL_ENV}
    process = subprocess.Popen(
        [*command, "--database-url", database_url],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_ready(process, f"http://127.0.0.1:{port}/healthz", "numerator up --aws moto", log)
        log.seek(0)
        yield process, log.read()
    finally:
        stop(process, signal.SIGTERM, 30)


@contextmanager
def local_stack(database_url: str, env_vars: Path, **function_env: str) -> Iterator[Stack]:
    """`numerator up --aws moto` on the Postgres of `database_url`, moto and that Postgres
    relayed to the bridge's address, the database URL in moto's Secrets Manager, and the
    --env-vars file at `env_vars` (removed afterwards), with `function_env` added."""
    import boto3

    gateway = bridge_gateway()
    with ExitStack() as running:
        log = running.enter_context(tempfile.TemporaryFile("w+"))
        up, said = running.enter_context(up_moto(database_url, log))
        found = UP_SAID.search(said)
        if not found:
            raise NumeratorError(f"numerator up did not say where moto is: {said[-2000:]}")
        endpoint, stream, table = found.groups()
        loopback = urlsplit(endpoint)
        moto_port = running.enter_context(
            relay(gateway, (loopback.hostname or "", loopback.port or 80))
        )
        pg_port = running.enter_context(relay(gateway, postgres_at(database_url)))
        aws = stand_in_aws()
        secrets = boto3.client(
            "secretsmanager",
            endpoint_url=endpoint,
            region_name=aws["AWS_DEFAULT_REGION"],
            aws_access_key_id=aws["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=aws["AWS_SECRET_ACCESS_KEY"],
        )
        secret = relayed_url(database_url, gateway, pg_port)
        arn = secrets.create_secret(Name=SECRET, SecretString=secret)["ARN"]
        function = {
            "AWS_ENDPOINT_URL": f"http://{gateway}:{moto_port}",
            "STREAM_NAME": stream,
            "REPLY_TABLE": table,
            "DATABASE_SECRET_ARN": arn,
            **LOCAL_ENV,
            **function_env,
        }
        env_vars.parent.mkdir(parents=True, exist_ok=True)
        env_vars.write_text(json.dumps({FUNCTION: function}, indent=2) + "\n")
        running.callback(env_vars.unlink, missing_ok=True)
        yield Stack(up, endpoint, env_vars, function)
