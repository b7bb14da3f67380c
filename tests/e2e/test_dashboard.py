"""The dashboard and the alert rules cannot drift from the code: every metric their queries name
is exported by a running numerator (`up`, and `up --aws moto` with its batcher), and the committed
dashboard.json is what monitoring/dashboard.py makes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import httpx
import pytest
import yaml

from monitoring.dashboard import OUT, expressions, render
from tests.e2e.service import Service

pytestmark = pytest.mark.slow

RULES = Path(__file__).resolve().parents[2] / "monitoring" / "rules.yml"
PROMETHEUS_OWN = {"up"}  # made by Prometheus for each target, not exported


def named(queries: Iterable[str]) -> set[str]:
    """The metric names PromQL expressions use (recording rules' `a:b:c` names are not)."""
    words = {w for q in queries for w in re.findall(r"(?<![\w:])[a-z_][a-z0-9_]*(?=[{\[\s)]|$)", q)}
    return {w for w in words if w.startswith(("numerator_", "process_")) or w in PROMETHEUS_OWN}


def exported(text: str) -> set[str]:
    """The metric names of a /metrics page (samples, and the families HELP announces)."""
    names = set(re.findall(r"^# HELP (\S+)", text, re.M))
    names |= set(re.findall(r"^([a-zA-Z_:][\w:]*)[{ ]", text, re.M))
    return names


def unexported(queries: Iterable[str], pages: Iterable[str]) -> set[str]:
    have = set().union(*(exported(page) for page in pages)) | PROMETHEUS_OWN
    return named(queries) - have


def rule_queries() -> list[str]:
    return [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def dashboard_queries() -> list[str]:
    return expressions(json.loads(OUT.read_text()))


def test_the_committed_dashboard_is_what_its_source_makes() -> None:
    assert OUT.read_text() == render(), "run: python -m monitoring.dashboard"


def test_a_query_naming_a_metric_nobody_exports_is_caught() -> None:
    page = "# HELP numerator_next_requests_total x\nnumerator_next_requests_total 3\n"
    assert unexported(["rate(numerator_next_requests_total[5m])"], [page]) == set()
    bad = ["sum(rate(numerator_next_request_total[5m])) / sum(up)"]
    assert unexported(bad, [page]) == {"numerator_next_request_total"}


def scrape(url: str) -> str:
    answer = httpx.get(url + "/metrics", timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.text


def test_every_metric_the_dashboard_and_rules_name_is_exported() -> None:
    queries = dashboard_queries() + rule_queries()
    assert len(named(queries)) > 25
    with Service("--ephemeral") as embedded:
        httpx.post(embedded.url + "/counters", json={"name": "m"}, timeout=30)
        httpx.post(embedded.url + "/counters/m/next", timeout=30)
        local = [scrape(embedded.url)]
    with Service("--aws", "moto", "--ephemeral") as aws:
        httpx.post(aws.url + "/counters", json={"name": "m"}, timeout=30)
        httpx.post(aws.url + "/counters/m/next", timeout=30)
        found = re.search(r"batcher\(s\) \((http://[\d.:]+)\)", aws.said())
        assert found, aws.output
        remote = [scrape(aws.url), scrape(found.group(1))]
    # Each name is exported on the path it is about: some only where there is AWS (calls,
    # throttles) or a separate batcher; none anywhere else is a name the code does not have.
    assert unexported(queries, local + remote) == set()
    assert unexported([q for q in queries if "aws" not in q], local) == set()
