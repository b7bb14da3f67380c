"""Postgres for `numerator up` and the bench: DATABASE_URL when given, else an embedded server
(pgserver) keeping its files in a data directory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from infra.errors import NumeratorError
from infra.run.server import own_folder, running


@dataclass
class Postgres:
    url: str
    pids: list[int] = field(default_factory=list)  # the server's, when it runs here


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(base) / "numerator"


@contextmanager
def embedded(data_dir: Path) -> Iterator[Postgres]:
    """Start (or join) the embedded Postgres keeping its files under `data_dir`. The server stops
    when the block ends."""
    with warnings.catch_warnings():
        # pgserver's lock file goes under /tmp/runtime-UID where XDG_RUNTIME_DIR is unset (root,
        # containers, CI): platformdirs warns of it at import, which is no concern of the user's.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import pgserver

    pgdata = data_dir / "pgdata"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with holding(data_dir):
        forget_dead_handles(pgdata)
        forget_dead_postmaster(pgdata)
        server = pgserver.get_server(pgdata, cleanup_mode="stop")
        try:
            pid = server.get_pid()
            yield Postgres(str(server.get_uri()), [pid] if pid else [])
        finally:
            server.cleanup()


@contextmanager
def ephemeral() -> Iterator[Postgres]:
    """An embedded Postgres in a temporary folder, deleted when the block ends; after a kill -9,
    when the next one starts (`stop_left`)."""
    with own_folder("ephemeral", stop_left) as folder, embedded(folder) as postgres:
        yield postgres


def stop_left(folder: Path) -> bool:
    """A SIGKILLed `up --ephemeral` leaves its Postgres running, and no later `up` would use its
    folder: stop it (an immediate shutdown: the data is thrown away). Whether the folder may go:
    not while a server that is not ours to stop (another user's) runs in it."""
    postmaster = pid_in(folder / "pgdata" / "postmaster.pid")
    if postmaster is None or not _is_postgres(postmaster):
        return True
    try:
        os.kill(postmaster, signal.SIGQUIT)
    except OSError:
        return False
    with contextlib.suppress(psutil.Error):
        psutil.Process(postmaster).wait(10)
    return True


def _is_postgres(pid: int) -> bool:
    try:
        return running(pid) and Path(psutil.Process(pid).cmdline()[0]).name == "postgres"
    except (psutil.Error, IndexError):
        return False


@contextmanager
def holding(data_dir: Path) -> Iterator[None]:
    """Claim `data_dir` for this process for the block: refuse, naming it, when another live
    numerator holds it (two services on one database would each believe they own its shards)."""
    claim = data_dir / "numerator.pid"
    pid = pid_in(claim)
    if pid and pid != os.getpid() and _is_numerator(pid):
        raise NumeratorError(
            f"another numerator (pid {pid}) is using {data_dir}: stop it first, or choose "
            "another --data-dir"
        )
    claim.write_text(f"{os.getpid()}\n")
    try:
        yield
    finally:
        if pid_in(claim) == os.getpid():
            claim.unlink(missing_ok=True)


def pid_in(file: Path) -> int | None:
    """The process id a pid file names first, or None (no file, or no number in it)."""
    try:
        return int(file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _is_numerator(pid: int) -> bool:
    try:
        return running(pid) and any("numerator" in p for p in psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def forget_dead_handles(pgdata: Path) -> None:
    """pgserver stops the server when its last user exits, counting users in a file of pids. A
    process that was killed never takes its pid out, and then no later exit stops the server:
    drop the pids of processes that are gone before joining (a killed process its parent has not
    reaped yet is gone too: a zombie exists, and counted, it kept the server running for ever)."""
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and running(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def forget_dead_postmaster(pgdata: Path) -> None:
    """After a crash, postmaster.pid (and the socket's lock file) may name a postmaster that is
    dead but not yet reaped — a zombie, where a container's init is slow to reap — which both
    pgserver and Postgres take for a running server. Remove such files when the process they
    name is gone or a zombie, so that a fresh server starts and recovers from its WAL."""
    for marker in [pgdata / "postmaster.pid", *pgdata.glob(".s.PGSQL.*.lock")]:
        pid = pid_in(marker)
        if pid is not None and not running(pid):
            marker.unlink(missing_ok=True)
