"""A real Prometheus (Debian's `prometheus`) with the shipped rules, scraping a `numerator up`:
stop its embedded Postgres under load and the availability alert fires, through Prometheus's own
API; start Postgres again and it resolves.

The rules are the shipped ones with every window and `for` divided by 30 (5m -> 10s, 1h -> 2m),
so that an outage of seconds burns the budget the way one of minutes would, in CI time; the
expressions are otherwise unchanged (monitoring/tests/ test them at full scale with promtool)."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.run.server import free_port
from tests.e2e.service import Service, data_dir, postgres_of
from tests.tools import debian_tool

pytestmark = pytest.mark.slow

RULES = Path(__file__).resolve().parents[2] / "monitoring" / "rules.yml"
SCALE = 30
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(text: str) -> int:
    return int(text[:-1]) * UNITS[text[-1]]


def scaled(rules: str) -> str:
    """The rules with every range, subquery step and `for` divided by SCALE (at least 1 s)."""

    def shrink(match: re.Match[str]) -> str:
        return f"{max(1, seconds(match.group(0)) // SCALE)}s"

    rules = re.sub(r"(?<=[\[:])\d+[smhd](?=[\]:])", shrink, rules)
    return re.sub(r"(?<=for: )\d+[smhd]", shrink, rules)


def test_the_scaling_keeps_the_rules_and_divides_their_times() -> None:
    text = RULES.read_text()
    small = scaled(text)
    assert "[5m]" in text and "[10s]" in small and "[5m]" not in small
    assert "[120s]" in small and "[8640s]" in small and "for: 2s" in small
    assert small.count("expr:") == text.count("expr:")


class Traffic:
    """Two client loops taking values from one counter until stopped; their statuses."""

    def __init__(self, url: str) -> None:
        self.url, self.running, self.statuses = url, True, Counter[int]()
        self.threads = [threading.Thread(target=self._run) for _ in range(2)]
        for thread in self.threads:
            thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as client:
            while self.running:
                try:
                    status = client.post("/counters/p/next").status_code
                except httpx.HTTPError:
                    status = 0
                self.statuses[status] += 1
                time.sleep(0.02)

    def stop(self) -> None:
        self.running = False
        for thread in self.threads:
            thread.join(15)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Prometheus's URL and the folder its configuration is written in (not started yet)."""
    yield f"http://127.0.0.1:{free_port()}", tmp_path / "prometheus"


def start(binary: str, url: str, folder: Path, target: str) -> subprocess.Popen[bytes]:
    folder.mkdir()
    (folder / "rules.yml").write_text(scaled(RULES.read_text()))
    (folder / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [rules.yml]\n"
        "scrape_configs:\n"
        f"  - job_name: numerator\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    with (folder / "log").open("wb") as log:
        return subprocess.Popen(
            [
                binary,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address={url.removeprefix('http://')}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def firing(url: str) -> set[str]:
    try:
        alerts = httpx.get(url + "/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    except (httpx.HTTPError, ValueError, KeyError):
        return set()
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def wait(check: Any, within: float, what: str) -> float:
    began = time.monotonic()
    while time.monotonic() - began < within:
        try:
            if check():
                return time.monotonic() - began
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {within} s")


def stop_postgres(data: Path) -> None:
    """Stop the Postgres serving `data`, if one runs (SIGINT: Postgres's fast shutdown)."""
    postgres = postgres_of(data)
    if postgres is not None:
        postgres.send_signal(signal.SIGINT)
        postgres.wait(30)


def test_the_availability_alert_fires_on_a_postgres_outage_and_resolves_after(
    tmp_path: Path, prometheus: tuple[str, Path]
) -> None:
    import pgserver
    from pgserver._commands import pg_ctl

    binary = debian_tool("prometheus", "prometheus")
    url, folder = prometheus
    data = data_dir(tmp_path)
    try:
        with Service("--data-dir", data, env={"REPLY_TIMEOUT_S": "2"}) as service:
            assert httpx.post(service.url + "/counters", json={"name": "p"}, timeout=30).is_success
            server = pgserver.get_server(Path(data) / "pgdata", cleanup_mode=None)
            process = start(binary, url, folder, service.url.removeprefix("http://"))
            traffic = Traffic(service.url)
            try:
                wait(lambda: httpx.get(url + "/-/ready", timeout=2).status_code == 200, 60, "ready")
                time.sleep(8)  # a clean stretch in the windows
                assert "NumeratorAvailabilityBurnFast" not in firing(url)
                pg_ctl(["-w", "stop", "-m", "fast"], pgdata=server.pgdata, user=server.system_user)
                fired = wait(
                    lambda: "NumeratorAvailabilityBurnFast" in firing(url), 60, "the page fires"
                )
                wait(lambda: "NumeratorPostgresUnreachable" in firing(url), 30, "the cause fires")
                during = dict(traffic.statuses)
                server.ensure_postgres_running()
                resolved = wait(
                    lambda: "NumeratorAvailabilityBurnFast" not in firing(url), 90, "it resolves"
                )
                # the cause resolves once the pool has reconnected: it may outlast the burn by
                # seconds
                cause = "NumeratorPostgresUnreachable"
                wait(lambda: cause not in firing(url), 60, "the cause resolves")
            finally:
                traffic.stop()
                process.terminate()
                process.wait(30)
    finally:
        # The Postgres this test started again (ensure_postgres_running) is its own: `up` stops
        # only the one it started, and this one would outlive the run.
        stop_postgres(Path(data))
    assert "SIGKILLed its process group" not in service.output, service.output[-3000:]
    assert during.get(200) and (during.get(503, 0) + during.get(504, 0)) > 0, during
    print(f"fired {fired:.0f} s after Postgres stopped, resolved {resolved:.0f} s after it started")
