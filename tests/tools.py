"""Programs some tests need from Debian's packages (promtool and prometheus, from `prometheus`):
found on PATH, or installed with apt-get where the tests run as root (CI's machine is fresh);
elsewhere the test is skipped, saying why (CI never skips: it fails)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

APT = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "-y", "-qq"]


def debian_tool(program: str, package: str) -> str:
    """The path of `program`, from Debian's `package` if need be."""
    found = shutil.which(program)
    if found:
        return found
    waited = time.monotonic() + 600
    while _apt_running() and time.monotonic() < waited:  # .ci/run's own install, under way
        time.sleep(2)
    found = shutil.which(program)
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run([*APT, "update"], env=env, capture_output=True, timeout=600)
        done = subprocess.run(
            [*APT, "install", "--no-install-recommends", package],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        found = shutil.which(program)
        if found:
            return found
        why = f"apt-get install {package} failed: {done.stderr[-500:]}"
    else:
        why = f"{program} is not installed (apt-get install {package}) and this is not root"
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def _apt_running() -> bool:
    return subprocess.run(["pgrep", "-x", "apt-get|dpkg"], capture_output=True).returncode == 0
