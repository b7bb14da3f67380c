"""`numerator sam-local start-api | invoke EVENT…`: the edge function in a Lambda container
through AWS SAM CLI, in one command.

It checks what sam local needs (the SAM CLI, a Python 3.12 for `sam build`, a Docker daemon, a
free port), builds or reuses the Lambda base image (`numerator lambda-image`, where AWS's images
cannot be pulled), runs `sam build` for this machine's CPU with that Python first on PATH (a
pyenv shim answers only for the versions pyenv has selected, and `sam build` rejects it), starts
the stack the function talks to (numerator.samstack), then `sam local start-api` until Ctrl-C or
SIGTERM, or `sam local invoke` of each event in turn.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from infra.errors import NumeratorError, Refused
from infra.run.process import RUNTIME, runtime_python, stand_in_aws, stop, wait_ready
from infra.run.server import cannot_listen, die_with_parent
from numerator import lambdaimage, samstack

EXTRA = "pip install 'numerator[aws-local]' (from a clone: pip install -e '.[aws-local]')"
STATE = Path(".aws-sam") / "numerator"  # beside the template: the build, the env-vars file


def sam_cli() -> str:
    """The `sam` beside this Python (the extra installs it there), else one on PATH."""
    beside = Path(sys.executable).parent / "sam"
    found = str(beside) if beside.exists() else shutil.which("sam")
    if not found:
        raise Refused(f"sam-local needs the AWS SAM CLI, which is not installed: {EXTRA}")
    return found


def sam_env() -> dict[str, str]:
    """The environment `sam` runs in: the Lambda runtime's Python first on PATH (its own folder,
    not a pyenv shim), stand-in AWS credentials, no telemetry."""
    python = runtime_python()
    if python is None:
        raise Refused(
            f"sam build needs a python{RUNTIME} (template.yaml's runtime) and none is here: "
            f"install one (`pyenv install {RUNTIME}`, or your system's python{RUNTIME} package)"
        )
    return {
        **os.environ,
        **stand_in_aws(),
        "SAM_CLI_TELEMETRY": "0",
        "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def overrides(*more: str) -> list[str]:
    """--parameter-overrides for this machine: the container runs its CPU (docs/deploy.md), and
    a cold container on a busy machine may take more than the default 10 s to answer."""
    local = [f"Architecture={lambdaimage.host_arch()}", "EdgeTimeout=29", "ReplyTimeout=20"]
    return ["--parameter-overrides", *local, *more]


def sam_build(template: Path, build_dir: Path) -> Path:
    """`sam build` of `template` for this machine's CPU into `build_dir`; the built template."""
    command = [sam_cli(), "build", "--template-file", str(template), "--build-dir", str(build_dir)]
    done = subprocess.run(
        [*command, *overrides()], env=sam_env(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip()[-3000:]
        raise NumeratorError(f"sam build failed ({done.returncode}): {said}")
    compile_bytecode(build_dir)
    return build_dir / "template.yaml"


def compile_bytecode(build_dir: Path) -> None:
    """The build's Python compiled beside it by the runtime's Python, as `.pyc` files checked
    against their source's hash (`checked-hash`: a zip keeps file times to two seconds, so a
    time-checked `.pyc` could pass for stale once unpacked, and a hash cannot be fooled by a
    build left in place). A Lambda container mounts /var/task read-only, so without them every
    cold start compiles all it imports: 2.6 s to the first answer in the stand-in image, under
    0.6 s with them and the lazy imports (docs/performance.md, `python -m bench.coldstart
    --image`)."""
    python = runtime_python()
    if python is None:
        return  # sam_env() refused already
    command = [str(python), "-m", "compileall", "-q", "-j", "0"]
    command += ["--invalidation-mode", "checked-hash", str(build_dir)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # a file that fails to compile fails alone: the rest are compiled
        said = (done.stdout + done.stderr).strip()[-500:]
        say(f"some of the build did not compile to bytecode ({done.returncode}): {said}")


@contextmanager
def start_api(
    built: Path, env_vars: Path | None, port: int, log: Path, *more: str, pull: bool = False
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`sam local start-api` on `built` with one warm container, on 127.0.0.1:`port`; its URL
    and process once /healthz answers through it. Stopped with SIGINT (its Ctrl-C, which
    removes the warm container), killed after 30 s. `pull`: AWS's image, not the stand-in."""
    command = [
        sam_cli(),
        *("local", "start-api", "--template-file", str(built)),
        *(() if pull else ("--skip-pull-image",)),
        *(("--env-vars", str(env_vars)) if env_vars else ()),
        *("--warm-containers", "EAGER", "--port", str(port), *overrides(*more)),
    ]
    with log.open("w+") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=sam_env(),
            start_new_session=True,
            preexec_fn=interruptible,
            text=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(process, url + "/healthz", "sam local start-api", out, lambda s: s > 0, 180)
            yield url, process
        finally:
            stop(process, signal.SIGINT, 30)


def interruptible() -> None:
    """In the child: SIGINT as Python's Ctrl-C again (a background job of a non-interactive
    shell starts with it ignored, and so would sam, which then never removes its containers),
    and SIGTERM when this process dies."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent()


def invoke(
    built: Path, env_vars: Path, event: Path, *more: str, pull: bool = False
) -> tuple[dict[str, Any], str]:
    """`sam local invoke` of one event file in a container of its own: the function's answer,
    and what SAM and the function logged."""
    command = [sam_cli(), "local", "invoke", samstack.FUNCTION, "--template-file", str(built)]
    command += ["--event", str(event), "--env-vars", str(env_vars)]
    command += [] if pull else ["--skip-pull-image"]
    done = subprocess.run(
        [*command, *overrides(*more)],
        env=sam_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        said = (done.stdout + done.stderr).strip()[-3000:]
        raise NumeratorError(f"sam local invoke {event} failed ({done.returncode}): {said}")
    return json.loads(lines[-1]), done.stderr


def run_sam_local(args: argparse.Namespace) -> None:
    template = args.template.resolve()
    state = template.parent / STATE
    preflight(args, template, state)
    try:
        with stopped_by_sigterm():
            run(args, template, state)
    except KeyboardInterrupt:
        say("stopped")


def preflight(args: argparse.Namespace, template: Path, state: Path) -> None:
    """Refuse, in one sentence naming the fix, what would fail later: before anything starts."""
    if not template.is_file():
        raise Refused(
            f"no {args.template} here: run sam-local in a clone of numerator (it builds "
            "template.yaml and its edge/), or name the template with --template"
        )
    sam_cli(), sam_env()
    if args.action == "start-api":
        problem = cannot_listen("127.0.0.1", args.port)
        if problem and "in use" in problem:
            raise Refused(f"port {args.port} is in use here: choose another with --port")
        if problem:
            raise Refused(problem)
    else:
        missing = [str(e) for e in args.events if not e.is_file()]
        if missing:
            raise Refused(f"no such event file: {', '.join(missing)} (see events/)")
    lambdaimage.docker_ready()
    if args.action == "start-api" and joinable(state):
        raise Refused(f"a sam-local start-api runs from {template.parent}: stop it first")


def run(args: argparse.Namespace, template: Path, state: Path) -> None:
    built = state / "build" / "template.yaml"
    if args.action == "invoke" and joinable(state):
        say(f"invoking on the stack of the sam-local start-api that runs ({state / 'env.json'})")
        invoke_each(args, built, state / "env.json")
        return
    if not args.pull:
        lambdaimage.build()
    started = time.monotonic()
    built = sam_build(template, state / "build")
    say(f"sam build: {time.monotonic() - started:.0f} s")
    from numerator.serving import database

    with (
        database(args) as (postgres, where),
        samstack.local_stack(postgres.url, state / "env.json") as stack,
    ):
        say(f"moto at {stack.endpoint}, Postgres with {where}; function env in {stack.env_vars}")
        if args.action == "invoke":
            invoke_each(args, built, stack.env_vars)
            return
        log = state / "start-api.log"
        authorizer = f"Authorizer={args.authorizer}"
        with start_api(built, stack.env_vars, args.port, log, authorizer, pull=args.pull) as (
            url,
            sam,
        ):
            print(
                f"sam local start-api at {url} (the edge function in a Lambda container, "
                f"{authorizer}; its log: {log}). Ctrl-C stops it.",
                flush=True,
            )
            watch({"sam local start-api": sam, "numerator up --aws moto": stack.up})


def joinable(state: Path) -> bool:
    """Whether a sam-local start-api runs from this folder: its env file is there and the moto
    it names answers."""
    try:
        function = json.loads((state / "env.json").read_text())[samstack.FUNCTION]
        return httpx.get(function["AWS_ENDPOINT_URL"] + "/moto-api/", timeout=2).is_success
    except (OSError, ValueError, KeyError, httpx.HTTPError):
        return False


def invoke_each(args: argparse.Namespace, built: Path, env_vars: Path) -> None:
    """Each event in the order given, a container each; the answers as lines of JSON."""
    for event in args.events:
        began = time.monotonic()
        answer, log = invoke(built, env_vars, event, pull=args.pull)
        print(json.dumps(answer), flush=True)
        status = answer.get("statusCode")
        say(f"{event}: {status} in {time.monotonic() - began:.1f} s{counted(log)}")
        if status == 404 and "counter-not-found" in str(answer.get("body")):
            say("no such counter yet: invoke the event that creates it first")


def counted(log: str) -> str:
    """The Duration of the emulator's REPORT line in `log` (not its Init Duration), to print."""
    report = re.search(r"^REPORT RequestId.*?\tDuration: ([\d.]+ ms)", log, re.MULTILINE)
    return f" (REPORT Duration {report.group(1)})" if report else ""


def watch(children: dict[str, subprocess.Popen[str]]) -> None:
    """Wait for Ctrl-C or SIGTERM; raise, naming it, if one of `children` exits first."""
    while True:
        time.sleep(0.5)
        for what, process in children.items():
            if process.poll() is not None:
                raise NumeratorError(f"{what} exited with status {process.returncode}")


@contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """SIGTERM taken as Ctrl-C for the block, so that everything started is stopped in order."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def say(line: str) -> None:
    print(f"numerator sam-local: {line}", file=sys.stderr, flush=True)
