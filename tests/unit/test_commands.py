"""The command line's parser (numerator/commands.py, with the bench's): every argument says what
it is in --help, and building it loads none of the commands' own code."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from numerator.commands import build_parser


def arguments(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += arguments(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            found.append((path, action))
    return found


def test_every_argument_of_every_command_has_help_text() -> None:
    found = arguments(build_parser(), "numerator")
    assert len(found) > 80  # every command's, the bench's too
    silent = [f"{path} {a.option_strings or a.dest}" for path, a in found if not a.help]
    assert silent == []


def test_the_parser_loads_no_postgres_boto3_or_http_client() -> None:
    code = (
        "import sys; from numerator.commands import build_parser; build_parser(); "
        "print(sorted(m for m in ('psycopg', 'boto3', 'httpx', 'pgserver', 'granian') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_url_without_a_scheme_fails_at_once_saying_so() -> None:
    """`--url localhost:18080` was retried for seconds before httpx's `unsupported protocol`."""
    began = time.monotonic()
    for command in (["counters", "list"], ["bench"]):
        done = subprocess.run(
            [sys.executable, "-m", "numerator", *command, "--url", "localhost:18080"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode in (1, 2), done.stderr
        assert "must start with http:// or https://" in done.stderr, done.stderr
        assert "did you mean http://localhost:18080?" in done.stderr
    assert time.monotonic() - began < 10, "no retries: two process starts"


def test_monitoring_writes_the_rules_the_dashboard_and_their_runbook(tmp_path: Path) -> None:
    from numerator.cli import main
    from numerator.shipped import relinked

    main(["monitoring", str(tmp_path / "ops")])
    root = Path(__file__).parents[2]
    for shipped, written in (
        ("monitoring/rules.yml", "rules.yml"),
        ("monitoring/dashboard.json", "dashboard.json"),
    ):
        assert (tmp_path / "ops" / written).read_bytes() == (root / shipped).read_bytes()
    for page in ("docs/operations.md", "docs/runbook.md"):
        text = (tmp_path / "ops" / page).read_text()
        assert text == relinked((root / page).read_text())
        # every relative link resolves where the pages were written (issue 54)
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (tmp_path / "ops" / "docs" / link).resolve().is_file(), (page, link)
    rules = (tmp_path / "ops" / "rules.yml").read_text()
    anchors = set(re.findall(r"runbook_url: docs/runbook.md#(\S+)", rules))
    runbook = (tmp_path / "ops" / "docs" / "runbook.md").read_text().lower()
    assert anchors and all(f"## {a}" in runbook.replace("`", "") for a in anchors), anchors
