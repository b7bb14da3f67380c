"""Traces off cost nothing: no OpenTelemetry import anywhere a request or a frame goes, and the
hot path's one test is of a module attribute. On, a traceparent is written and read by hand."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from infra.errors import SettingsError
from infra.observe import traces
from infra.settings import Settings, TraceSettings

OFF = """
import sys
from functions.handler import build
from numerator.stack import BatcherStack, EdgeStack, EmbeddedStack
from functions.app import create_app
from batcher.worker import Batcher
from infra.observe import traces
from infra.settings import TraceSettings
assert traces.configure(TraceSettings(), "edge") is False
assert not traces.ON
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
assert not loaded, loaded
"""


def test_with_tracing_off_no_opentelemetry_module_is_imported() -> None:
    done = subprocess.run([sys.executable, "-c", OFF], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_tracing_is_on_when_a_file_or_an_endpoint_is_named() -> None:
    assert not Settings.from_env({}).tracing.on
    assert Settings.from_env({"TRACE_FILE": "/tmp/t.jsonl"}).tracing.on
    assert Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}).tracing.on


def test_a_traceparent_is_written_and_read_as_w3c_says() -> None:
    given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    context = traces.parsed(given)
    assert context is not None and context.trace_flags.sampled
    assert traces.traceparent(context) == given
    for bad in ("", "00-xyz-00f067aa0ba902b7-01", "00-" + "0" * 32 + "-" + "0" * 16 + "-01"):
        assert traces.parsed(bad) is None, bad


def test_tracing_without_the_sdk_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SettingsError, match=r"TRACE_FILE: .*numerator\[trace\]"):
        traces.require(TraceSettings(trace_file="/tmp/t.jsonl"))
    traces.require(TraceSettings())  # off: nothing to find


def test_configured_it_writes_the_file_and_posts_otlp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`configure` as a process runs it: the SDK's sampler from OTEL_TRACES_SAMPLER (as
    `Linked`), the service named by role, a JSON line a trace span in TRACE_FILE, and OTLP/HTTP
    protobuf posted to OTEL_EXPORTER_OTLP_ENDPOINT's /v1/traces."""
    posted: list[tuple[str, str]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            posted.append((self.path, self.headers["Content-Type"]))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    for variable, value in {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_TRACES_SAMPLER": "parentbased_always_off",
    }.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    file = tmp_path / "traces.jsonl"
    settings = Settings.from_env({"TRACE_FILE": str(file), "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    try:
        assert traces.configure(settings.tracing, "batcher") and traces.ON
        with traces.step("dropped"):  # a root: parentbased_always_off says no
            pass
        parent = traces.parsed("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        assert parent is not None
        from opentelemetry.trace import Link

        with traces._t().start_as_current_span("linked", links=[Link(parent)]):
            pass  # linked to a sampled one: kept
        unsampled = traces.parsed("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
        assert unsampled is not None
        with traces._t().start_as_current_span("unsampled", links=[Link(unsampled)]):
            pass  # linked to none sampled: dropped, whatever the SDK's draw
        traces.flush()
    finally:
        traces.uninstall()
        server.shutdown()
        server.server_close()
    [line] = [json.loads(text) for text in file.read_text().splitlines()]
    assert line["name"] == "linked" and line["service"] == "numerator-batcher"
    assert line["links"] == [
        {"trace": "4bf92f3577b34da6a3ce929d0e0e4736", "span": "00f067aa0ba902b7"}
    ]
    assert posted == [("/v1/traces", "application/x-protobuf")]
