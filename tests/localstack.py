"""LocalStack without Docker, for the services it can serve here: `localstack-core` in host mode
(`python -m localstack.runtime.main`, OVERRIDE_IN_DOCKER=0) serves Kinesis from its npm backend
(kinesis-mock, fetched on first use). Its DynamoDB needs Java 21 and a download this machine cannot
make, so the tests that use it keep replies on moto. LocalStack pins libraries numerator's venv
does not share, so it gets a venv of its own, made once in ~/.cache/numerator/localstack.

`python tests/localstack.py` makes that venv and nothing else (standard library only): `.ci/run`
starts it beside the project's own install, and the fixture waits for it under a file lock."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HOME = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "numerator" / "localstack"
# localstack-core 4.9.2 as released imports cbor2's old private decoder and pyOpenSSL's
# X509.add_extensions, and twisted needs service_identity: the versions it was built against.
PACKAGES = [
    "localstack-core[runtime]==4.9.2",
    "cbor2==5.6.5",
    "cryptography==43.0.3",
    "pyopenssl==24.2.1",
    "service_identity==24.1.0",
]


def install() -> Path:
    """The venv's python, made and filled when missing (about two minutes, once)."""
    venv = HOME / "venv"
    python = venv / "bin" / "python"
    marker = venv / ".numerator-packages"
    HOME.mkdir(parents=True, exist_ok=True)
    with (HOME / "install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time; the others wait, then use it
        if marker.exists() and marker.read_text() == "\n".join(PACKAGES):
            return python
        subprocess.run(
            [sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=120
        )
        done = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *PACKAGES,
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, f"cannot install LocalStack: {done.stderr[-3000:]}"
        marker.write_text("\n".join(PACKAGES))
        return python


def warm(url: str) -> None:
    """Make the first Kinesis call here, with minutes to spare: it starts LocalStack's
    kinesis-mock (fetched from npm on a bare machine), which took longer than a client's 10 s
    read timeout in CI, and the test that happened to make it failed."""
    import boto3
    from botocore.config import Config

    from tests.aws import DEFAULTS  # the tests' region and account

    kinesis = boto3.client(
        "kinesis",
        endpoint_url=url,
        region_name=DEFAULTS["AWS_DEFAULT_REGION"],
        aws_access_key_id=DEFAULTS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DEFAULTS["AWS_SECRET_ACCESS_KEY"],
        config=Config(read_timeout=300, retries={"max_attempts": 1}),
    )
    kinesis.list_streams()


@contextmanager
def localstack() -> Iterator[str]:
    """LocalStack (Kinesis) on a free loopback port; its URL."""
    import httpx

    from infra.run.server import free_port

    python = install()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    volume = HOME / "volume"
    volume.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "OVERRIDE_IN_DOCKER": "0",
        "GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "SERVICES": "kinesis",
        "LOCALSTACK_VOLUME_DIR": str(volume),
        "DNS_ADDRESS": "0",
    }
    env.pop("AWS_ENDPOINT_URL", None)
    with (HOME / "localstack.log").open("w") as log:
        process = subprocess.Popen(
            [str(python), "-m", "localstack.runtime.main"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=HOME,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, (HOME / "localstack.log").read_text()[-3000:]
            try:
                health = httpx.get(url + "/_localstack/health", timeout=2).json()
                if health["services"].get("kinesis") in ("available", "running"):
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            assert time.monotonic() < deadline, "LocalStack did not start within 120 s"
            time.sleep(0.5)
        warm(url)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


if __name__ == "__main__":
    install()
