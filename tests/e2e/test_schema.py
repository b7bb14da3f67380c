"""schemathesis against `numerator up`: every phase (examples, coverage, fuzzing, stateful) and
every check, at least 1,000 generated cases, with an admin key (so that the keys the stateful
phase creates cannot lock it out); no 5xx and no conformance failure. Its settings are in
tests/schemathesis.toml."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.service import Service

pytestmark = pytest.mark.slow

TESTS = Path(__file__).parents[1]


def test_schemathesis_finds_nothing(tmp_path: Path) -> None:
    service = Service("--ephemeral")
    try:
        made = httpx.post(service.url + "/keys", json={"name": "fuzz", "scopes": ["admin"]})
        assert made.status_code == 201, made.text
        secret = made.json()["secret"]
        admin = {"Authorization": f"Bearer {secret}"}
        confirming = {"name": "fuzz-confirm", "confirm": "required"}
        assert httpx.post(service.url + "/counters", json=confirming, headers=admin).is_success
        taken = httpx.post(
            service.url + "/counters/fuzz-confirm/next", params={"count": 50}, headers=admin
        )
        assert taken.status_code == 200, taken.text
        run = subprocess.run(
            [
                *(sys.executable, "-m", "schemathesis.cli"),
                *("--config-file", str(TESTS / "schemathesis.toml")),
                *("run", service.url + "/openapi.json"),
                *("--checks", "all", "--max-examples", "40", "--request-timeout", "10"),
                *("--header", f"Authorization: Bearer {secret}", "--no-color"),
            ],
            cwd=tmp_path,  # its caches and reports go here, not into the repository
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        service.stop()
    summary = run.stdout[-3000:]
    assert run.returncode == 0, summary
    generated = re.search(r"(\d+) generated", run.stdout)
    assert generated and int(generated.group(1)) >= 1000, summary
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert re.search(rf"✅ +{phase}", run.stdout), summary
    assert "No issues found" in run.stdout, summary
