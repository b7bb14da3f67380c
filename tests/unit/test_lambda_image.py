"""`numerator lambda-image` without a Docker daemon: one sentence saying how to start one, exit
status 1, no traceback (the image itself is built by tests/e2e/test_sam_local.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def lambda_image(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "numerator", "lambda-image"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def said_how_to_start_docker(done: subprocess.CompletedProcess[str], what: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"numerator: {what}"), done.stderr
    assert "dockerd" in done.stderr and "Docker Desktop" in done.stderr


def test_without_a_docker_command(tmp_path: Path) -> None:
    bare = tmp_path / "bin"  # a PATH with this Python and nothing else
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    said_how_to_start_docker(lambda_image({"PATH": str(bare)}), "no docker command here")


def test_without_a_docker_daemon(tmp_path: Path) -> None:
    nobody = f"unix://{tmp_path}/docker.sock"  # no daemon listens there
    what = "no Docker daemon answers" if shutil.which("docker") else "no docker command here"
    said_how_to_start_docker(lambda_image({"DOCKER_HOST": nobody}), what)
