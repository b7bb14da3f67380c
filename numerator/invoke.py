"""`numerator invoke EVENT…`: API Gateway events through the Lambda handler, without Docker.

What `sam local invoke` does in a container, done in a child Python: the events go, in order,
to `functions.handler.handler` in one container (the app built by the first, kept for the rest),
and each answer is printed as one line of JSON. The function's environment is this process's
(MODE=aws, DATABASE_URL, STREAM_NAME, REPLY_TABLE, AWS_ENDPOINT_URL…), as Lambda's is the
template's. With `--build DIR` the handler is the one `sam build` put in DIR, run from that
folder alone (`python -E -s`: nothing of this project or its venv), by the runtime's Python.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from infra.errors import NumeratorError
from infra.run.process import RUNTIME, runtime_python

RUNNER = """
import json, sys, time
if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])  # the build folder, before anything else
import functions.handler as entry

class Context:
    aws_request_id = "invoke"
    function_name = "numerator-edge"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:numerator-edge"
    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds
    def get_remaining_time_in_millis(self):
        return max(0, int((self.deadline - time.monotonic()) * 1000))

for line in sys.stdin:
    asked = json.loads(line)
    answer = entry.handler(asked["event"], Context(asked["timeout"]))
    print("ANSWER " + json.dumps(answer), flush=True)

# Lambda freezes a container and never closes it; this one ends, so it closes its Postgres pool
# and stops its tasks rather than leave asyncio to complain of them at exit.
if entry._container is not None:
    import asyncio
    loop = asyncio.get_event_loop()
    loop.run_until_complete(entry._container[0].app.edge.store.close())
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
"""


class InvokeError(NumeratorError):
    pass


def run_invoke(args: argparse.Namespace) -> None:
    events = [read(Path(path)) for path in args.events]
    command = runner(args.build, args.python)
    asked = "".join(json.dumps({"event": e, "timeout": args.timeout}) + "\n" for e in events)
    done = subprocess.run(
        command,
        input=asked,
        cwd=args.build or None,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    answers = [line[7:] for line in done.stdout.splitlines() if line.startswith("ANSWER ")]
    for answer in answers:
        print(answer)
    if done.returncode != 0 or len(answers) != len(events):
        raise InvokeError(
            f"the handler answered {len(answers)} of {len(events)} event(s) and exited "
            f"{done.returncode}; its log is above"
        )


def read(path: Path) -> object:
    try:
        event = json.loads(path.read_text())
    except OSError as exc:
        raise InvokeError(f"cannot read the event {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise InvokeError(f"the event {path} is not JSON: {exc}") from None
    if not isinstance(event, dict) or not ("requestContext" in event or "httpMethod" in event):
        raise InvokeError(f"{path} is not an API Gateway event (see events/)")
    return event


def runner(build: Path | None, python: str | None) -> list[str]:
    """The child's command: this project's handler in this Python, or the build's alone."""
    if build is None:
        return [python or sys.executable, "-c", RUNNER]
    if not (build / "functions" / "handler.py").is_file():
        raise InvokeError(f"{build} holds no functions/handler.py: a `sam build` function folder?")
    found = python or runtime_python()
    if found is None:
        raise InvokeError(
            f"no python{RUNTIME} here (pyenv's, or on PATH), the runtime the build is for; "
            "name one with --python"
        )
    return [str(found), "-E", "-s", "-c", RUNNER, "."]
