"""Bytes logged a request, as CloudWatch Logs would take them in: what `numerator plan` bills
for logs. `numerator plan --measure-logs` runs `python -m numerator.plan.logprobe`:

- the Lambda edge through its real entry point (`functions.handler.handler`: Powertools' logger,
  Mangum, the EMF lines), one container alone in a process on the probe's stack (moto, a batcher
  and a throwaway Postgres: `probe.aws_stack`), the process's logging set as Lambda's Python
  runtime sets it for template.yaml's `LoggingConfig` (JSON, application logs at INFO) and its
  EMF_INTERVAL_S; the atomic counter's handler (`bench.atomic`) the same way;
- the server edge as `numerator up --aws moto` serves it, with the template's EMF_INTERVAL_S.

Each counts what the process writes to stdout and stderr (where Lambda and the awslogs driver
take logs from) while it serves `INVOCATIONS` warm /next requests, one EMF line's bytes (a
container's or a worker's line each interval), and the bytes of a /next answer as the server edge
sends it (status line, headers, body: what goes out to a client). It prints JSON.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from numerator.plan.probe import NAME, aws_stack, request

INVOCATIONS = 50
EMF_INTERVAL_S = "60"  # template.yaml's, for the Lambda edge, the Fargate edge and the batchers


class RuntimeJson(logging.Formatter):
    """The line Lambda's Python runtime writes for a log record under `LogFormat: JSON`."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = {
            "timestamp": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
            "requestId": "8f5a7c2e-3b1d-4e6f-9a0b-1c2d3e4f5a6b",
        }
        return orjson.dumps(line).decode()


def as_lambda_runs() -> None:
    """This process's logging as Lambda's runtime leaves it (ApplicationLogLevel INFO, JSON)."""
    os.environ.update(
        AWS_LAMBDA_LOG_LEVEL="INFO",
        AWS_LAMBDA_LOG_FORMAT="JSON",
        AWS_LAMBDA_FUNCTION_NAME="numerator-edge",
        EMF_INTERVAL_S=EMF_INTERVAL_S,
    )
    out = logging.StreamHandler(sys.stdout)
    out.setFormatter(RuntimeJson())
    logging.basicConfig(level=logging.INFO, handlers=[out], force=True)


def counted(work: Callable[[], object]) -> int:
    """Bytes `work` writes to this process's stdout and stderr."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            work()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
        return sink.seek(0, os.SEEK_END)


def per_request(invoke: Callable[[dict[str, Any]], dict[str, Any]], n: int) -> float:
    """Bytes logged a warm /next through `invoke`, the counter made and the container warmed."""
    invoke(request("POST", "/counters", orjson.dumps({"name": NAME})))
    for _ in range(3):
        invoke(request("POST", f"/counters/{NAME}/next"))

    def serve() -> None:
        for _ in range(n):
            answer = invoke(request("POST", f"/counters/{NAME}/next"))
            if answer["statusCode"] != 200:
                raise RuntimeError(f"a counted invocation failed: {answer}")

    return counted(serve) / n


def lambdas(n: int) -> dict[str, float]:
    """The Lambda edge's and the atomic counter's bytes a request, and one EMF line's."""
    as_lambda_runs()
    from bench import atomic
    from functions import handler
    from numerator.lambdaedge import INVOCATION_TIMEOUT_S, Context

    def edge(event: dict[str, Any]) -> dict[str, Any]:
        return handler.handler(event, Context(INVOCATION_TIMEOUT_S))

    out = {"lambda": per_request(edge, n)}
    assert handler._container is not None
    emf = handler._container[1]
    edge(request("POST", f"/counters/{NAME}/next"))
    out["lambda_emf_line"] = float(counted(emf.flush))
    atomic.make_table(atomic.TABLE)
    out["atomic"] = per_request(lambda event: atomic.handler(event, None), n)
    return out


def server(n: int) -> dict[str, float]:
    """The server edge's bytes a request (`numerator up --aws moto`), and its EMF line's (the
    one a worker writes as it stops)."""
    import httpx

    from infra.run.server import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "EMF_INTERVAL_S": EMF_INTERVAL_S}
    argv = [sys.executable, "-m", "numerator", "up", "--aws", "moto", "--ephemeral"]
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "up.log"
        with log.open("wb") as sink:
            argv += ["--port", str(port), "--workers", "1"]
            up = subprocess.Popen(argv, stdout=sink, stderr=sink, env=env)
        try:
            with httpx.Client(base_url=url, timeout=10) as client:
                ready(client, up)
                client.post("/counters", json={"name": NAME})
                for _ in range(3):
                    client.post(f"/counters/{NAME}/next").raise_for_status()
                time.sleep(0.5)
                before = log.stat().st_size
                for _ in range(n):
                    answer = client.post(f"/counters/{NAME}/next").raise_for_status()
                time.sleep(0.5)
                after = log.stat().st_size
        finally:
            up.send_signal(signal.SIGINT)
            up.wait(60)
        tail = log.read_bytes()[after:].splitlines(keepends=True)
        lines = [line for line in tail if line.startswith(b"{") and b'"_aws"' in line]
    emf = float(len(lines[0])) if lines else 0.0
    return {
        "server": (after - before) / n,
        "server_emf_line": emf,
        "response_bytes": float(http_bytes(answer)),
    }


def http_bytes(answer: Any) -> int:
    """An HTTP/1.1 answer's bytes on the wire: its status line, headers and body."""
    status = len(f"HTTP/1.1 {answer.status_code} {answer.reason_phrase}\r\n")
    headers = sum(len(k) + len(v) + 4 for k, v in answer.headers.raw)
    return status + headers + 2 + len(answer.content)


def ready(client: Any, up: subprocess.Popen[bytes]) -> None:
    import httpx

    for _ in range(240):
        if up.poll() is not None:
            raise RuntimeError("numerator up --aws moto stopped before it served")
        try:
            if client.get("/healthz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError("numerator up --aws moto did not answer /healthz within a minute")


def main(which: str, n: int = INVOCATIONS) -> None:
    if which == "server":
        out = server(n)
    else:
        with aws_stack():
            out = lambdas(n)
    rounded = {k: round(v, 1) for k, v in out.items()}
    print(orjson.dumps({"log_bytes": rounded}).decode(), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else INVOCATIONS)
