"""A client generated from the live service's /openapi.json by openapi-python-client (PyPI), as
a team in another codebase would make one: named operations and models, and it works."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.service import Service

pytestmark = pytest.mark.slow

GENERATOR = shutil.which("openapi-python-client") or str(
    Path(sys.executable).parent / "openapi-python-client"
)


META = ("--meta", "none")  # the package alone, no pyproject around it


def generate(spec: str, folder: Path) -> Any:
    """The generated package, imported."""
    source = folder / "spec.json"
    source.write_text(spec)
    package = folder / "numerator_api"
    run = subprocess.run(
        [GENERATOR, "generate", "--path", str(source), "--output-path", str(package), *META],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Unable to" not in run.stdout + run.stderr, "every schema and response generated"
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module("numerator_api")
    finally:
        sys.path.remove(str(folder))


def test_a_generated_client_creates_takes_values_and_reads_a_problem(tmp_path: Path) -> None:
    with Service("--ephemeral") as service:
        spec = httpx.get(service.url + "/openapi.json", timeout=30).text
        api = generate(spec, tmp_path)
        from numerator_api.api.counters import create_counter, get_counter, next_values
        from numerator_api.models import NewCounter, Problem, Value, Values

        with api.Client(base_url=service.url) as client:
            new = NewCounter(name="gen", template="G-{value:03d}")
            made = create_counter.sync(client=client, body=new)
            assert made is not None and made.name == "gen" and made.template == "G-{value:03d}"
            one = next_values.sync(client=client, name="gen")
            assert isinstance(one, Value) and (one.value, one.formatted) == (1, "G-001")
            three = next_values.sync(client=client, name="gen", count=3, idempotency_key="order-1")
            assert isinstance(three, Values)
            assert [v.formatted for v in three.values] == ["G-002", "G-003", "G-004"]
            again = next_values.sync(client=client, name="gen", count=3, idempotency_key="order-1")
            assert isinstance(again, Values) and again.first == 2, "the same key: the same values"
            missing = next_values.sync_detailed(client=client, name="nope")
            assert missing.status_code == 404 and isinstance(missing.parsed, Problem)
            assert missing.parsed.type_ == "urn:numerator:problem:counter-not-found"
            counter = get_counter.sync(client=client, name="gen")
            assert counter is not None and counter.value == 4
