"""Bad settings stop `numerator up` at once, with a message naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("variable", "value"), [("BACK_FRAME_MS", "soon"), ("REPLY_TIMEOUT_S", "0")]
)
def test_up_refuses_bad_settings(variable: str, value: str) -> None:
    env = {**os.environ, variable: value}
    done = subprocess.run(
        [sys.executable, "-m", "numerator", "up", "--ephemeral", "--port", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1
    assert variable in done.stderr


def test_up_says_when_the_database_cannot_be_reached() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "numerator",
            "up",
            "--port",
            "1",
            "--database-url",
            "postgresql://nobody@127.0.0.1:9/none",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "cannot reach Postgres" in done.stderr


def test_up_refuses_a_port_in_use() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "numerator", "up", "--ephemeral", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    assert f"127.0.0.1:{port} is in use" in done.stderr
