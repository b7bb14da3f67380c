"""Traces off cost nothing: no OpenTelemetry import anywhere a request or a frame goes, and the
hot path's one test is of a module attribute. On, a traceparent is written and read by hand."""

from __future__ import annotations

import subprocess
import sys

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
