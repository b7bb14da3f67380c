"""OpenTelemetry's SDK, set up for numerator: imported by `traces.configure` only when this
process traces (an ImportError here says the `trace` extra is not installed)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, get_current_span
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from infra.settings import TraceSettings

FILE_DELAY_MS = 500
"""How often finished trace spans are appended to TRACE_FILE: a user reads it as a run goes."""
LINKS = 10_000
"""The most links a trace span keeps (the SDK's default is 128): a frame links to each sampled
request it serves, up to FRAME_MAX_RECORDS; one past the limit would lose its frame."""


def provider(settings: TraceSettings, role: str) -> TracerProvider:
    """A tracer provider: its sampler the SDK's (OTEL_TRACES_SAMPLER) as `Linked`, its trace
    spans to TRACE_FILE and to the OTLP endpoint, whichever the settings name. The service is
    OTEL_SERVICE_NAME, or `numerator-<role>`."""
    resource = Resource.create({"numerator.role": role})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": f"numerator-{role}"}))
    made = TracerProvider(resource=resource, span_limits=SpanLimits(max_links=LINKS))
    made.sampler = Linked(made.sampler)
    if settings.trace_file:
        exporter = JsonLines(settings.trace_file)
        made.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=FILE_DELAY_MS))
    if settings.otel_exporter_otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        made.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return made


class Linked(Sampler):
    """The SDK's sampler, but a root trace span with links follows them: sampled if one of them
    is, else dropped. A frame (or a front frame) is recorded exactly when a request it served
    is, so a 1 % sample has each sampled request's frame and no frame of its own draw; a frame
    of records that carry no trace context (an edge that does not trace) has the SDK's draw."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        root = not get_current_span(parent_context).get_span_context().is_valid
        if root and links:
            sampled = any(link.context.trace_flags.sampled for link in links)
            return SamplingResult(Decision.RECORD_AND_SAMPLE if sampled else Decision.DROP)
        return self.sampler.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"Linked{{{self.sampler.get_description()}}}"


class JsonLines(SpanExporter):
    """Appends each finished trace span to a file as one JSON line (`line`). Every process of
    `numerator up` appends to the same file; each batch is one write."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        data = b"".join(json.dumps(line(span)).encode() + b"\n" for span in spans)
        with self.lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        return SpanExportResult.SUCCESS


def line(span: ReadableSpan) -> dict[str, Any]:
    """A finished trace span as `JsonLines` writes it, and bench/waterfall.py reads it: ids in
    hex, times in Unix nanoseconds."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "trace": f"{context.trace_id:032x}",
        "span": f"{context.span_id:016x}",
        "parent": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "start": span.start_time,
        "end": span.end_time,
        "service": str(span.resource.attributes.get("service.name", "")),
        "attributes": dict(span.attributes or {}),
        "links": [
            {"trace": f"{link.context.trace_id:032x}", "span": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
    }
