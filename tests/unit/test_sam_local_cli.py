"""`numerator sam-local` refusing what would fail later: one sentence naming the fix, exit status
1, no traceback, before anything starts; and the pieces of its stack that need no Docker: where
a Postgres URL listens, the URL a container uses, the relay (sam local itself runs in
tests/e2e/test_sam_local.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.errors import Refused
from numerator import lambdaimage, samlocal
from numerator.relay import relay
from numerator.samstack import postgres_at, relayed_url

ROOT = Path(__file__).parents[2]


def sam_local(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "numerator", "sam-local", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def said(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()  # one line, the reason and the fix
    assert line.startswith("numerator: "), line
    for word in words:
        assert word in line, line


@pytest.fixture
def listened() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def test_a_port_in_use_is_named_with_the_option_to_choose_another(listened: int) -> None:
    done = sam_local("start-api", "--port", str(listened))
    said(done, f"port {listened} is in use", "--port")


def test_no_docker_daemon_says_how_to_start_one(tmp_path: Path) -> None:
    nobody = f"unix://{tmp_path}/docker.sock"  # no daemon listens there
    done = sam_local("start-api", "--port", "0", env={"DOCKER_HOST": nobody})
    said(done, "dockerd", "Docker Desktop")


def test_no_python_for_sam_build_says_which_to_install(tmp_path: Path) -> None:
    """No pyenv 3.12 (another HOME) and no python3.12 on PATH (only this venv's folder)."""
    bare = {"HOME": str(tmp_path), "PATH": str(Path(sys.executable).parent)}
    done = sam_local("invoke", "events/http-api-next.json", env=bare)
    said(done, "python3.12", "pyenv install 3.12")


def test_no_template_says_where_to_run_it(tmp_path: Path) -> None:
    done = sam_local("start-api", "--template", str(tmp_path / "template.yaml"))
    said(done, "a clone of numerator", "--template")


def test_a_missing_event_file_is_named() -> None:
    said(sam_local("invoke", "events/nothing-such.json"), "events/nothing-such.json")


def test_no_sam_cli_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no sam beside it
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Refused, match=r"numerator\[aws-local\]"):
        samlocal.sam_cli()


def test_no_debootstrap_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(lambdaimage.ImageError, match="apt-get install debootstrap"):
        lambdaimage.debootstrap(tmp_path / "root")


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("postgresql://postgres:@/postgres?host=/tmp/n/pgdata", "/tmp/n/pgdata/.s.PGSQL.5432"),
        ("postgresql://u:pw@db.example:6432/app?sslmode=require", ("db.example", 6432)),
        ("postgresql://u@127.0.0.1/app", ("127.0.0.1", 5432)),
    ],
)
def test_where_a_postgres_listens(url: str, where: object) -> None:
    assert postgres_at(url) == where


def test_the_url_a_container_uses_keeps_user_password_and_options() -> None:
    url = "postgresql://u:p%40ss@db.example:6432/app?sslmode=require&host=/ignored"
    relayed = relayed_url(url, "172.17.0.1", 40000)
    assert relayed == "postgresql://u:p%40ss@172.17.0.1:40000/app?sslmode=require"
    socket_url = "postgresql://postgres:@/postgres?host=/tmp/n/pgdata"
    assert relayed_url(socket_url, "172.17.0.1", 1) == "postgresql://postgres@172.17.0.1:1/postgres"


def echo_server(server: socket.socket) -> None:
    with server:
        connection, _ = server.accept()
        with connection:
            while data := connection.recv(65536):
                connection.sendall(data.upper())


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_the_relay_passes_bytes_both_ways_and_stops(kind: str, tmp_path: Path) -> None:
    if kind == "tcp":
        server = socket.create_server(("127.0.0.1", 0))
        target: str | tuple[str, int] = ("127.0.0.1", server.getsockname()[1])
    else:
        target = str(tmp_path / "s.sock")
        server = socket.socket(socket.AF_UNIX)
        server.bind(target)
        server.listen()
    threading.Thread(target=echo_server, args=(server,), daemon=True).start()
    with relay("127.0.0.1", target) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            client.sendall(b"x" * 200_000)
            got = b""
            while len(got) < 200_000:
                got += client.recv(65536)
        assert got == b"X" * 200_000
    with pytest.raises(OSError):  # stopped: nothing listens there any more
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_the_emulators_duration_is_read_from_its_report_not_the_init_duration() -> None:
    log = (
        "START RequestId: ea2b Version: $LATEST\n"
        "REPORT RequestId: ea2b\tInit Duration: 0.08 ms\tDuration: 5743.84 ms\t"
        "Billed Duration: 5744 ms\tMemory Size: 512 MB\tMax Memory Used: 512 MB\n"
    )
    assert samlocal.counted(log) == " (REPORT Duration 5743.84 ms)"
    assert samlocal.counted("END RequestId: ea2b\n") == ""
