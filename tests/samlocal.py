"""What the `sam local` tests stand on: a Docker daemon (waited for; in CI its absence fails),
the stand-in Lambda image (`numerator lambda-image`, reused when current), `sam build` for this
machine's CPU, Postgres over TCP (the embedded one listens on a unix socket only, out of a
container's reach: a relay in a thread), `numerator up --aws moto` with the database URL in a
moto secret as the template's DATABASE_SECRET_ARN expects it, and the --env-vars file that
points the function there. The function's container reaches them through relays on the
bridge's gateway."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest

from infra.run.process import runtime_python, stand_in_aws, wait_ready
from infra.run.server import free_port
from tests.e2e.service import Service
from tests.unit.test_template import ROOT, TEMPLATE

SAM = str(Path(sys.executable).parent / "sam")
# The container runs this machine's CPU (docs/deploy.md); a cold container on a busy machine
# may take more than the default 10 s for its first request.
LOCAL = ("Architecture=x86_64", "EdgeTimeout=29", "ReplyTimeout=20")


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def docker_daemon(patience: float = 90.0) -> None:
    """Return once a Docker daemon answers (.ci/run starts one in the background); otherwise
    skip, saying why, or in CI fail."""
    deadline = time.monotonic() + patience
    while True:
        if shutil.which("docker"):
            done = subprocess.run(["docker", "info"], capture_output=True, check=False)
            if done.returncode == 0:
                return
        if time.monotonic() > deadline or not (in_ci() or shutil.which("dockerd")):
            break
        time.sleep(2)
    why = "sam local needs a Docker daemon and none answers (docs/deploy.md: how to start one)"
    if in_ci():
        pytest.fail(why)
    pytest.skip(why)


def sam_env() -> dict[str, str]:
    python = runtime_python()
    assert python is not None, "sam build for python3.12 needs a python3.12"
    return {
        **os.environ,
        **stand_in_aws(),
        "SAM_CLI_TELEMETRY": "0",
        "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}",
    }


def sam(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SAM, *args], cwd=ROOT, env=sam_env(), capture_output=True, text=True, timeout=timeout
    )


def sam_build(out: Path) -> Path:
    """`sam build` for this machine's CPU into `out`; the built template."""
    done = sam(
        "build",
        "--template-file",
        str(TEMPLATE),
        "--build-dir",
        str(out),
        "--parameter-overrides",
        *LOCAL,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out / "template.yaml"


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
        check=True,
    )
    gateway, _, interface = done.stdout.strip().rpartition(" ")
    if gateway:
        return gateway
    shown = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", interface], capture_output=True, text=True, check=True
    )
    found = re.search(r"inet ([\d.]+)/", shown.stdout)
    assert found, shown.stdout
    return found.group(1)


@contextmanager
def relay(host: str, target: str | tuple[str, int]) -> Iterator[int]:
    """A TCP port on `host` relaying each connection to `target`: a unix socket's path, or a
    host and port (moto and the embedded Postgres listen on loopback only)."""
    loop = asyncio.new_event_loop()
    listening: list[int] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if isinstance(target, str):
            up_reader, up_writer = await asyncio.open_unix_connection(target)
        else:
            up_reader, up_writer = await asyncio.open_connection(*target)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def start() -> asyncio.Server:
        server = await asyncio.start_server(serve, host, 0)
        listening.append(server.sockets[0].getsockname()[1])
        return server

    async def stop() -> None:
        server.close()
        await server.wait_closed()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    server = loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, name="relay", daemon=True)
    thread.start()
    try:
        yield listening[0]
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@dataclass
class Stack:
    """`numerator up --aws moto` on a TCP Postgres, and the --env-vars file for the function."""

    service: Service
    moto: str  # its endpoint, as this machine reaches it
    env_vars: Path


def tcp_url(socket_url: str, host: str, port: int) -> str:
    """The URL of the same database over a relay (pgserver's URLs name a socket folder)."""
    parts = urlsplit(socket_url)
    return f"postgresql://{parts.username or 'postgres'}@{host}:{port}{parts.path}"


def socket_dir(url: str) -> str:
    return parse_qs(urlsplit(url).query)["host"][0]


@contextmanager
def moto_stack(database_url: str, folder: Path, **function_env: str) -> Iterator[Stack]:
    """`numerator up --aws moto` on the Postgres of `database_url` (a unix socket's), and the
    --env-vars file that points the function at its moto and that Postgres through relays on
    the bridge's gateway, the database URL in a moto secret (DATABASE_SECRET_ARN)."""
    env = {**stand_in_aws(), "READ_INTERVAL_MS": "50"}
    gateway = bridge_gateway()
    with (
        Service("--aws", "moto", "--database-url", database_url, env=env) as service,
        relay(gateway, f"{socket_dir(database_url)}/.s.PGSQL.5432") as pg_port,
    ):
        said = service.said()
        found = re.search(
            r"moto server at http://([\d.]+):(\d+); stream (\S+) and table (\S+) ", said
        )
        assert found, said
        moto_host, moto_port, stream, table = found.groups()
        with relay(gateway, (moto_host, int(moto_port))) as moto_relay:
            endpoint = f"http://{moto_host}:{moto_port}"
            secrets = boto3.client("secretsmanager", endpoint_url=endpoint, **aws_args())
            url = tcp_url(database_url, gateway, pg_port)
            name = f"numerator-database-{uuid.uuid4().hex[:8]}"
            arn = secrets.create_secret(Name=name, SecretString=url)["ARN"]
            env_vars = folder / "env.json"
            function = {
                "AWS_ENDPOINT_URL": f"http://{gateway}:{moto_relay}",
                "STREAM_NAME": stream,
                "REPLY_TABLE": table,
                "DATABASE_SECRET_ARN": arn,
                "READ_INTERVAL_MS": "50",
                **function_env,
            }
            env_vars.write_text(json.dumps({"EdgeFunction": function}, indent=2))
            yield Stack(service, endpoint, env_vars)


def aws_args() -> dict[str, str]:
    aws = stand_in_aws()
    return {
        "region_name": aws["AWS_DEFAULT_REGION"],
        "aws_access_key_id": aws["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": aws["AWS_SECRET_ACCESS_KEY"],
    }


@contextmanager
def start_api(template: Path, env_vars: Path | None, log: Path, *overrides: str) -> Iterator[str]:
    """`sam local start-api` on `template` with one warm container; its URL once it answers."""
    port = free_port()
    command = [
        SAM,
        *("local", "start-api", "--template-file", str(template), "--skip-pull-image"),
        *(("--env-vars", str(env_vars)) if env_vars else ()),
        *("--warm-containers", "EAGER", "--port", str(port)),
        *("--parameter-overrides", *LOCAL, *overrides),
    ]
    with log.open("w+") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=sam_env())
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(process, url + "/healthz", "sam local start-api", out, lambda s: s > 0, 180)
            yield url
        finally:
            process.terminate()
            process.wait(30)
            out.seek(0)
            said = [line for line in out if re.search(r"WARNING\"|ERROR|Error|Traceback", line)]
            print(f"sam local start-api: {len(said)} warning/error line(s)", *said[-20:], sep="\n")
