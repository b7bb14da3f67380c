"""The check that a test run leaves nothing running (tests/leftovers.py) finds what it must: a
child still running, and a detached server whose command line names the session's folder."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.leftovers import left_behind, stop

SLEEP = "import time; time.sleep(60)"


def test_a_child_and_a_detached_process_naming_the_folder_are_found(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", SLEEP])
    marked = tmp_path / "pgdata"
    # a grandchild whose parent exits at once: detached, as `pg_ctl start` leaves a postmaster
    subprocess.run(
        ["sh", "-c", f'{sys.executable} -c "{SLEEP}" {marked} >/dev/null 2>&1 &'], check=True
    )
    elsewhere = subprocess.run(
        ["sh", "-c", f'{sys.executable} -c "{SLEEP}" /elsewhere >/dev/null 2>&1 & echo $!'],
        check=True,
        capture_output=True,
        text=True,
    )
    other = int(elsewhere.stdout)
    try:
        deadline = time.monotonic() + 10
        while True:
            found = left_behind(tmp_path, os.getpid())
            pids = {p.pid for p in found}
            detached = [p for p in found if str(marked) in " ".join(p.cmdline())]
            if (child.pid in pids and detached) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert child.pid in pids, "a child still running"
        assert detached, "a detached process naming the session's folder"
        assert other not in pids, "a detached process of someone else's is not this run's"
    finally:
        stop(left_behind(tmp_path, os.getpid()))
        os.kill(other, 9)
    child.wait(10)
    assert not left_behind(tmp_path, os.getpid())
