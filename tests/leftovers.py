"""What a test run leaves running: a server a test started and did not stop (a Postgres it
restarted by hand, a Prometheus, a `numerator up`) outlives the run and holds its port, memory and
files. The session fixture in tests/conftest.py fails the run that leaves one, and stops it."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil


def left_behind(folder: Path, parent: int) -> list[psutil.Process]:
    """The processes still running that this test session started: those below `parent` (this
    process), and those whose command line names a path under `folder` (the session's temporary
    directory), which were detached from it (a server started by `pg_ctl`, say)."""
    found = {p.pid: p for p in psutil.Process(parent).children(recursive=True)}
    mark = str(folder)
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(mark in part for part in process.info["cmdline"] or ()):
                found.setdefault(process.pid, process)
    found.pop(parent, None)
    return [p for p in found.values() if _alive(p)]


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe(process: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return f"pid {process.pid}: {' '.join(process.cmdline())[:200]}"
    return f"pid {process.pid}"


def stop(processes: list[psutil.Process]) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(processes, timeout=10)
