"""A real PgBouncer in transaction pooling mode in front of a test Postgres, on a loopback port:
Debian's `pgbouncer` (tests/tools.py finds or installs it), run with the `[pgbouncer]` settings
docs/deploy.md gives users ("Behind a pooler"), verbatim, and this fixture's own address, files
and trust of the loopback user beside them."""

from __future__ import annotations

import os
import pwd
import re
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg

from infra.run.server import free_port
from tests.tools import debian_tool

DEPLOY = Path(__file__).parents[1] / "docs" / "deploy.md"
# The server connections PgBouncer keeps per database and user: fewer than a stack's clients
# (workers x POOL_MAX and the batchers'), so that transactions share server sessions.
POOL_SIZE = 4


def documented_settings() -> str:
    """The `[pgbouncer]` block of docs/deploy.md's "Behind a pooler", as a user copies it."""
    section = DEPLOY.read_text().split("## Behind a pooler", 1)[1]
    found = re.search(r"```ini\n(\[pgbouncer\]\n.*?)```", section, flags=re.DOTALL)
    assert found, 'docs/deploy.md has no ```ini [pgbouncer] block under "Behind a pooler"'
    return found.group(1)


def backend(url: str) -> tuple[str, int, str]:
    """Where `url`'s server listens (a host, or a Unix socket's folder), its port and user."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "127.0.0.1"])[0]
    port = int(query.get("port", [parts.port or 5432])[0])
    return host, port, parts.username or "postgres"


def config(url: str, folder: Path, port: int) -> str:
    host, server_port, user = backend(url)
    return (
        f"[databases]\n* = host={host} port={server_port}\n\n"
        + documented_settings()
        + "\n; the fixture's own\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        f"default_pool_size = {POOL_SIZE}\nlogfile = {folder / 'pgbouncer.log'}\n"
        f"; (the user the server trusts: {user})\n"
    )


def runs_as(url: str) -> list[str]:
    """PgBouncer refuses to run as root: as root, `-u` the owner of the server's socket folder
    (the embedded server's own user), which can reach the socket; else as this user."""
    if os.geteuid() != 0:
        return []
    host, _, _ = backend(url)
    owner = os.stat(host).st_uid if host.startswith("/") else pwd.getpwnam("nobody").pw_uid
    return ["-u", pwd.getpwuid(owner).pw_name]


@contextmanager
def pgbouncer(url: str) -> Iterator[str]:
    """PgBouncer (transaction mode) on a free loopback port in front of `url`'s server; yields
    `url` as reached through it. Stopped (SIGTERM, then SIGKILL) when the block ends."""
    program = debian_tool("pgbouncer", "pgbouncer")
    folder = Path(tempfile.mkdtemp(prefix="numerator-pgbouncer-"))
    folder.chmod(0o755)
    port = free_port()
    _, _, user = backend(url)
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(config(url, folder, port))
    (folder / "pgbouncer.log").touch(mode=0o666)
    os.chmod(folder / "pgbouncer.log", 0o666)
    command = [program, *runs_as(url), str(folder / "pgbouncer.ini")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pooled = f"postgresql://{user}@127.0.0.1:{port}/{urlsplit(url).path.lstrip('/') or user}"
    try:
        _wait(process, port, folder)
        yield pooled
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()


def _wait(process: subprocess.Popen[bytes], port: int, folder: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (folder / "pgbouncer.log").read_text()
            raise AssertionError(f"pgbouncer exited ({process.returncode}):\n{log[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"pgbouncer did not listen on {port} within 15 s")


def sessions(url: str) -> int:
    """Server sessions of `url`'s database that are not this query's own: how many the
    pooler keeps open (the tests' proof that the stack's connections shared them)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        ).fetchone()
    assert row is not None
    return int(row[0])
