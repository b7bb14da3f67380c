"""The Lambda edge's cold start, measured from a `sam build` folder:

    sam build --parameter-overrides Architecture=x86_64   # this machine's CPU
    python -m bench.coldstart [--build-dir .aws-sam/build/EdgeFunction] [--runs 7] [--image]

Each run is a fresh Python 3.12 process holding only the build folder (as a Lambda container
does): it times the process's start (in a container, runc's setting up of it too), `import
functions.handler` (the init phase), the first invocation (the app and Powertools built, then
a request answered without an AWS call: a 422), a second one, and the making of the Kinesis and
DynamoDB clients, which the first request that needs them (a /next) pays. The
medians are printed; process start, import and first invocation together are the cold start.

`--image` runs each in a container of the stand-in Lambda image (`numerator lambda-image`), the
build folder mounted read-only at /var/task as `sam local` mounts it: no bytecode is written
there, so a cold start compiles what it imports unless the build holds its bytecode (`numerator
sam-local` compiles it, numerator.samlocal.compile_bytecode; a bare `sam build` does not).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

from infra.run.process import RUNTIME, runtime_python, stand_in_aws

EVENTS = Path(__file__).parents[1] / "events"
IMAGE = f"public.ecr.aws/lambda/python:{RUNTIME}-x86_64"

PROBE = """
import json, os, sys, time
with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
    ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
    started_ms = (float(uptime.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")) * 1000
began = time.perf_counter()
sys.path.insert(0, ".")
import functions.handler as entry
imported = time.perf_counter()

class Context:
    aws_request_id = "cold-start"
    function_name = "numerator-edge"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:numerator-edge"
    def get_remaining_time_in_millis(self):
        return 10000

event = json.loads(sys.stdin.read())
first = time.perf_counter()
status = entry.handler(event, Context())["statusCode"]
second = time.perf_counter()
entry.handler(event, Context())
done = time.perf_counter()
from infra.adapters.aws import clients
from infra.settings import Settings
made = clients(Settings.from_env())
made.kinesis.meta, made.dynamodb.meta
aws = time.perf_counter()
print("COLD " + json.dumps({"start_ms": started_ms, "import_ms": (imported - began) * 1000,
    "first_ms": (second - first) * 1000, "second_ms": (done - second) * 1000,
    "clients_ms": (aws - done) * 1000, "status": status}))
"""


def measure(build: Path, python: str, runs: int, image: str | None = None) -> dict[str, float]:
    event = (EVENTS / "http-api-next-bad-count.json").read_text()
    env = {
        **os.environ,
        "MODE": "aws",
        # template.yaml's default: API Gateway's IAM authorizer checks callers, so the edge
        # answers the probe without reading API keys from a Postgres it does not have here
        "AUTH": "none",
        "AUTHORIZER": "iam",
        **stand_in_aws(),
    }
    samples: list[dict[str, float]] = []
    probe = ["-E", "-s", "-c", PROBE]
    command = [python, *probe]
    if image:
        passed = ("MODE", "AUTH", "AUTHORIZER", *stand_in_aws())
        command = ["docker", "run", "--rm", "-i", "-v", f"{build.resolve()}:/var/task:ro"]
        command += [a for name in passed for a in ("-e", name)]
        command += ["--entrypoint", f"/var/lang/bin/python{RUNTIME}", image, *probe]
    for _ in range(runs):
        done = subprocess.run(
            command,
            input=event,
            cwd=build,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("COLD ")]
        if not lines:
            raise SystemExit(f"the probe failed: {done.stderr[-2000:]}")
        sample = json.loads(lines[-1][5:])
        if sample["status"] != 422:
            raise SystemExit(f"the probe's event was answered {sample['status']}, not 422")
        samples.append(sample)
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.coldstart")
    parser.add_argument("--build-dir", type=Path, default=Path(".aws-sam/build/EdgeFunction"))
    parser.add_argument("--python", default=str(runtime_python() or "python3.12"))
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--image",
        nargs="?",
        const=IMAGE,
        help=f"in a container of this image, /var/task read-only (default {IMAGE})",
    )
    args = parser.parse_args(argv)
    if not (args.build_dir / "functions" / "handler.py").exists():
        raise SystemExit(f"no built function in {args.build_dir}: run `sam build` first")
    got = measure(args.build_dir, args.python, args.runs, args.image)
    where = f"containers of {args.image}" if args.image else "processes"
    cold = got["start_ms"] + got["import_ms"] + got["first_ms"]
    print(
        f"median of {args.runs} fresh {where}: process start {got['start_ms']:.0f} ms, "
        f"import {got['import_ms']:.0f} ms, first invocation {got['first_ms']:.0f} ms (cold "
        f"start {cold:.0f} ms), next {got['second_ms']:.1f} ms; the AWS clients, made by the "
        f"first request that needs them (a /next), {got['clients_ms']:.0f} ms"
    )


if __name__ == "__main__":
    main()
