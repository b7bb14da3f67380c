"""numerator on the Postgres versions users run, not only the 16 that pgserver embeds: the
store's tests against 14 (the oldest supported: infra/adapters/postgres/versions.py) and 15
(Debian 12's), each on a server of its own (tests/postgres.py); a version outside the range is
refused at start with one sentence. The fault matrix runs cells of its own on 14 and 15
(tests/e2e/test_matrix.py, VERSION_CELLS)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

from infra.adapters.postgres import versions
from infra.run.server import free_port
from numerator import cli
from tests.postgres import cluster

pytestmark = pytest.mark.slow

# The tests whose subject is the store (infra/adapters/postgres/): every role's statements, the
# frame's one statement, the migrations, the ledger and its chains, on both paths' batchers.
MAJORS = [14, 15]  # the oldest supported, and Debian 12's
STORE_TESTS = [
    "tests/integration/test_migrations.py",
    "tests/integration/test_batcher.py",
    "tests/integration/test_frame_statement.py",
    "tests/integration/test_frame_policy.py",
    "tests/integration/test_concurrency.py",
    "tests/integration/test_abandon.py",
    "tests/integration/test_ledger.py",
    "tests/integration/test_tamper.py",
    "tests/integration/test_keys.py",
    "tests/integration/test_api.py",
    "tests/integration/test_aws_batcher.py",
]


@pytest.fixture(scope="module")
def store_runs() -> Iterator[dict[int, subprocess.Popen[str]]]:
    """The store's tests on 14 and 15 at once, each a child pytest on a server of its own: on
    two cores side by side they take little more than one of them alone. Each has a base temp
    folder of its own: two sessions ending at once in pytest's shared one both clear its
    `pytest-current` link, and the second fails (CI: every test passed, exit 1)."""
    with contextlib.ExitStack() as running:
        runs = {}
        for major in MAJORS:
            server = running.enter_context(cluster(major))
            assert server.version() == major
            temp = running.enter_context(tempfile.TemporaryDirectory(prefix=f"store-{major}-"))
            runs[major] = subprocess.Popen(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                 f"--basetemp={temp}/pytest", *STORE_TESTS],
                env={**os.environ, "DATABASE_URL": server.url},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        yield runs
        for run in runs.values():
            if run.poll() is None:
                run.kill()
            run.communicate()


@pytest.mark.parametrize("major", MAJORS)
def test_the_store_on(major: int, store_runs: dict[int, subprocess.Popen[str]]) -> None:
    said, _ = store_runs[major].communicate(timeout=900)
    last = said.strip().splitlines()[-1] if said.strip() else ""
    print(f"\nPostgres {major}: {last}")
    assert store_runs[major].returncode == 0, said[-6000:]
    assert " passed" in last and "skipped" not in last, last


def test_a_version_out_of_range_is_refused_in_one_sentence(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`numerator up --database-url` on a server outside the range: the sentence, exit 1, no
    traceback. The range is narrowed to leave out the 14 at hand (no older server can be had)."""
    monkeypatch.setattr(versions, "OLDEST", 15)
    with cluster(14) as server:
        with pytest.raises(SystemExit) as exited:
            cli.main(["up", "--database-url", server.url, "--port", str(free_port())])
        said = capsys.readouterr().err.strip()
    assert exited.value.code == 1
    assert said == (
        f"numerator: PostgreSQL 14.22 at 127.0.0.1:{server.port} is not supported: numerator "
        "runs on PostgreSQL 15 to 18 (docs/deploy.md)"
    ), said
