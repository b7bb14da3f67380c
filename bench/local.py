"""Stacks the bench starts itself (`--local`): one embedded Postgres, and on it numerator or a
baseline as child processes on free ports."""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import httpx

from bench.errors import BenchError
from infra.run.embedded import Postgres, ephemeral
from infra.run.process import stand_in_aws, started
from infra.run.server import free_port
from infra.settings import Settings

MODES = ("embedded", "server", "lambda")
"""embedded: `numerator serve` on the in-process stream; server and lambda: the AWS path (`--aws`),
its edge as HTTP workers with front frames, or each request through the Lambda handler."""
TARGETS = ("numerator", "baseline-rowlock", "baseline-sequence", "baseline-atomic")
STAND_IN = (
    "import runpy, sys; from bench.standins import stand_in; stand_in(sys.argv.pop(1)); "
    "runpy.run_module('numerator', run_name='__main__', alter_sys=True)"
)
"""`python -c` for numerator with a stand-in for its frame's statement (bench.standins): run as a
program, as `python -m numerator` is, in a process the stand-in was put in first."""


@dataclass
class Target:
    name: str
    url: str
    pids: list[int]
    settings: dict[str, object]
    others: list[str] = field(default_factory=list)
    """Further /metrics of the same service: the AWS path's batchers."""


@contextmanager
def database(url: str | None = None) -> Iterator[Postgres]:
    """The given Postgres, or a throwaway embedded one (its server's pid is sampled too)."""
    if url:
        yield Postgres(url)
        return
    with ephemeral() as postgres:
        yield postgres


@contextmanager
def serve(
    target: str, db: Postgres, workers: int, env: dict[str, str], tree: str | None = None
) -> Iterator[Target]:
    """Start `target` on `db` and yield it once /healthz answers; stop it with SIGINT. `tree`:
    a checkout of another version (a git worktree) to run numerator from instead of this one."""
    port = free_port()
    environment = {**os.environ, **env, "DATABASE_URL": db.url}
    if target == "numerator":
        command = [sys.executable, "-m", "numerator", "serve", "--database-url", db.url]
    elif target.startswith("standin-"):  # numerator with a stand-in statement (bench.standins)
        command = [sys.executable, "-c", STAND_IN, target.removeprefix("standin-"), "serve"]
        command += ["--database-url", db.url]
    elif target == "bare":  # the bare ASGI app on the same server (bench/trivial.py)
        command = [sys.executable, "-m", "bench.trivial"]
    else:
        mode = target.removeprefix("baseline-")
        command = [sys.executable, "-m", "bench.baseline", mode, "--database-url", db.url]
    command += ["--port", str(port), "--workers", str(workers)]
    url = f"http://127.0.0.1:{port}"
    if tree is not None:  # its packages first: `python -m` puts the working directory first
        environment["PYTHONPATH"] = env.get("PYTHONPATH", tree)
    with started(command, environment, url + "/healthz", target, cwd=tree) as (process, _):
        settings: dict[str, object] = {
            "workers": workers,
            "back_frame_ms": Settings.from_env(environment).frames.back_frame_ms,
            "shards": 0 if target.startswith("baseline-") or target == "bare" else workers,
            "environment": dict(env),
        }
        yield Target(target, url, [process.pid], settings)


@contextmanager
def serve_aws(
    db: Postgres, endpoint: str, edge: str, workers: int, batchers: int, env: dict[str, str]
) -> Iterator[Target]:
    """`numerator up --aws ENDPOINT --edge EDGE` on `db`, on a stream and table of this run's
    own; yield it once /healthz answers, with its batchers' URLs; stop it with SIGINT (the edge,
    then the batchers, then moto)."""
    port = free_port()
    own = f"bench-{uuid.uuid4().hex[:8]}"
    environment = {
        **os.environ,
        "STREAM_NAME": own,
        "REPLY_TABLE": own + "-replies",
        **env,
        "DATABASE_URL": db.url,
    }
    command = [sys.executable, "-m", "numerator", "up", "--aws", endpoint, "--edge", edge]
    command += ["--database-url", db.url, "--port", str(port), "--workers", str(workers)]
    command += ["--batchers", str(batchers)]
    url = f"http://127.0.0.1:{port}"
    with started(command, environment, url + "/healthz", "the stack", patience=60) as (
        process,
        log,
    ):
        log.seek(0)
        found = re.search(r"batcher\(s\) \(([^)]*)\)", log.read())
        others = found.group(1).split(", ") if found else []
        service = Settings.from_env(environment)
        settings: dict[str, object] = {
            "workers": workers,
            "back_frame_ms": service.frames.back_frame_ms,
            "shards": service.aws.shards,
            "read_beats": str(service.aws.read_beats),
            "batchers": batchers,
            "edge": edge,
            "lambda_containers": service.local.lambda_containers if edge == "lambda" else None,
            "front_frame_ms": service.edge.front_frame_ms if edge == "server" else 0.0,
            "front_frame_policy": str(service.edge.front_frame_policy) if edge == "server" else "",
            "read_interval_ms": service.aws.read_interval_ms,
            "environment": dict(env),
        }
        yield Target(f"numerator-aws-{edge}", url, [process.pid], settings, others)


@contextmanager
def serve_atomic(endpoint: str, env: dict[str, str]) -> Iterator[Target]:
    """The atomic-counter baseline (bench/atomic.py) on DynamoDB at `endpoint` — with `moto`,
    a moto server of its own, as `numerator up --aws moto` starts one — once /healthz answers."""
    pids = []
    with ExitStack() as stack:
        if endpoint == "moto":
            port = free_port()
            endpoint = f"http://127.0.0.1:{port}"
            moto = [sys.executable, "-m", "numerator.motoserver", "-H", "127.0.0.1"]
            moto += ["-p", str(port)]
            made = started(moto, dict(os.environ), endpoint + "/moto-api/", "moto")
            pids.append(stack.enter_context(made)[0].pid)
        port = free_port()
        environment = {**os.environ, **stand_in_aws(), **env}
        command = [sys.executable, "-m", "bench.atomic", "--endpoint", endpoint]
        command += ["--table", f"bench-atomic-{uuid.uuid4().hex[:8]}", "--port", str(port)]
        url = f"http://127.0.0.1:{port}"
        process, _ = stack.enter_context(started(command, environment, url + "/healthz", "atomic"))
        settings: dict[str, object] = {"workers": 1, "back_frame_ms": 0.0, "shards": 0}
        yield Target("baseline-atomic", url, [process.pid, *pids], settings)


def create_counters(url: str, names: list[str], headers: dict[str, str] | None = None) -> None:
    """Create the scenario's counters (an existing one is fine)."""
    with httpx.Client(base_url=url, timeout=10, headers=headers) as client:
        for name in names:
            try:
                response = client.post("/counters", json={"name": name})
            except httpx.HTTPError as exc:
                raise BenchError(f"cannot reach {url}: {exc}") from None
            if response.status_code not in (201, 409):
                raise BenchError(f"cannot create counter {name}: {response.text[:300]}")
