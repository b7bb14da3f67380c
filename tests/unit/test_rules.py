"""The shipped Prometheus rules (monitoring/rules.yml), with the real tool: they load
(`promtool check rules`), their unit tests pass (`promtool test rules`), every alert is tested
both firing and silent, a broken alert fails its tests, and every runbook link has its section."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.tools import debian_tool

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "monitoring" / "rules.yml"
TESTS = sorted((ROOT / "monitoring" / "tests").glob("*.yml"))
RUNBOOK = ROOT / "docs" / "runbook.md"


@pytest.fixture(scope="module")
def promtool() -> str:
    return debian_tool("promtool", "prometheus")


def alerts(rules: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}


def run(promtool: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_the_rules_load_and_their_tests_pass(promtool: str) -> None:
    checked = run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run(promtool, "test", "rules", *map(str, TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_tested_firing_and_silent() -> None:
    names = set(alerts(yaml.safe_load(RULES.read_text())))
    firing: set[str] = set()
    silent: set[str] = set()
    for path in TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check["exp_alerts"] else silent).add(check["alertname"])
    assert names - firing == set(), "alerts never tested firing"
    assert names - silent == set(), "alerts never tested silent"


def broken(tmp_path: Path, expr: str) -> list[Path]:
    """The rules with every alert's expression replaced by `expr`, and the tests pointed at
    them."""
    rules = yaml.safe_load(RULES.read_text())
    for rule in alerts(rules).values():
        rule["expr"] = expr
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    (tmp_path / "tests").mkdir()
    copies = []
    for path in TESTS:
        copy = tmp_path / "tests" / path.name
        copy.write_text(path.read_text())
        copies.append(copy)
    return copies


@pytest.mark.parametrize("expr", ["vector(0) > 1", "vector(1)"], ids=["never", "always"])
def test_a_broken_alert_fails_its_tests(promtool: str, tmp_path: Path, expr: str) -> None:
    """Every alert made to never fire (its firing case fails) or to always fire (its silent
    case fails): promtool names each one's failure, so the tests can fail for every alert."""
    tested = run(promtool, "test", "rules", *map(str, broken(tmp_path, expr)), cwd=tmp_path)
    assert tested.returncode != 0
    said = tested.stdout + tested.stderr
    failed = set(re.findall(r"alertname: (\w+)", said))
    assert failed == set(alerts(yaml.safe_load(RULES.read_text()))), said[-2000:]


def test_every_runbook_link_has_its_section() -> None:
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in RUNBOOK.read_text().splitlines()
        if line.startswith("## ")
    }
    for name, rule in alerts(yaml.safe_load(RULES.read_text())).items():
        link = rule["annotations"]["runbook_url"]
        assert link == f"docs/runbook.md#{name.lower()}", name
        assert name.lower() in anchors, f"docs/runbook.md has no section for {name}"
