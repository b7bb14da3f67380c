"""OpenTelemetry traces of one request's trip: the edge, its record's put, the batcher's read and
frame (linked to every request it served), the commit, the publish, and the reply's wait.

Off by default, and then free: nothing here imports OpenTelemetry, and the hot path pays one
test of `ON` (FastPath, the front frame). `configure` turns it on in a process when the settings
name where trace spans go (TRACE_FILE, OTEL_EXPORTER_OTLP_ENDPOINT); the SDK reads its own
standard variables (OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER and _ARG, OTEL_BSP_*).

"Trace span" here is OpenTelemetry's span; a `Span` elsewhere in numerator (infra/spans.py) is a
run of a counter's values, and has nothing to do with this.

A record carries its put's trace context on the wire as a W3C `traceparent` (Record.trace, `tp`
in its JSON). The batcher's frame is a trace of its own with a link to each record's put: one
frame serves many requests, so it has no one parent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from infra.errors import SettingsError
from infra.settings import TraceSettings
from infra.wire import Record

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import SpanContext, Tracer

    from infra.ports import Entry, Replies, Stream

ON = False
"""Whether this process traces: the one test the hot path pays when it does not."""
_tracer: Tracer | None = None
_provider: TracerProvider | None = None
NOTHING = contextlib.nullcontext()
INSTALL = "pip install 'numerator[trace]'"


def configure(settings: TraceSettings, role: str) -> bool:
    """Trace this process if `settings` name where trace spans go (once: a second call does
    nothing); whether it traces. `role` names it (edge, batcher, lambda, edge+batcher) in the
    trace spans' resource, and in their service name unless OTEL_SERVICE_NAME gives one."""
    if ON or not settings.on:
        return ON
    try:
        from infra.observe import otel
    except ImportError:
        variable = "TRACE_FILE" if settings.trace_file else "OTEL_EXPORTER_OTLP_ENDPOINT"
        raise SettingsError(variable, f"traces need OpenTelemetry's SDK: {INSTALL}") from None
    install(otel.provider(settings, role))
    return True


def require(settings: TraceSettings) -> None:
    """Refuse (SettingsError, naming the variable) settings that trace without the SDK."""
    import importlib.util

    if settings.on and importlib.util.find_spec("opentelemetry.sdk") is None:
        variable = "TRACE_FILE" if settings.trace_file else "OTEL_EXPORTER_OTLP_ENDPOINT"
        raise SettingsError(variable, f"traces need OpenTelemetry's SDK: {INSTALL}")


def install(provider: TracerProvider) -> None:
    """Trace this process into `provider` (the tests' in-memory exporter, or `configure`'s)."""
    global ON, _tracer, _provider
    _provider, _tracer, ON = provider, provider.get_tracer("numerator"), True


def uninstall() -> None:
    """Stop tracing (its trace spans sent, its exporters shut down): the tests turn it off."""
    global ON, _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    ON, _tracer, _provider = False, None, None


def flush() -> None:
    """Send what is finished now: a Lambda container is frozen between invocations."""
    if _provider is not None:
        _provider.force_flush(timeout_millis=2000)


def _t() -> Tracer:
    assert _tracer is not None, "configure() or install() first"
    return _tracer


# The W3C traceparent, written and read by hand: a record carries one, and the propagator's
# carrier dance costs more than the string it makes.
def traceparent(context: SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def parsed(value: str) -> SpanContext | None:
    """The trace context a `traceparent` names, or None for one that names none."""
    from opentelemetry.trace import SpanContext, TraceFlags

    parts = value.split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3][:2], 16)
    except ValueError:
        return None
    context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
    return context if context.is_valid else None


# The edge ------------------------------------------------------------------------------------


async def request(
    serve: Callable[[Any, Any, Any], Awaitable[None]], scope: Any, receive: Any, send: Any
) -> None:
    """Serve one HTTP request inside a trace span of its own (a child of the client's, if its
    `traceparent` header names one), its status recorded as it is sent."""
    from opentelemetry.trace import SpanKind, StatusCode, set_span_in_context

    parent = None
    for name, value in scope.get("headers", ()):
        if name == b"traceparent":
            found = parsed(value.decode("latin-1"))
            if found is not None:
                from opentelemetry.trace import NonRecordingSpan

                parent = set_span_in_context(NonRecordingSpan(found))
            break
    method, path = scope.get("method", ""), scope.get("path", "")
    route = "/counters/{name}/next" if path.endswith("/next") else ""
    attributes = {"http.request.method": method, "url.path": path}
    if route:
        attributes["http.route"] = route
    with _t().start_as_current_span(
        f"{method} {route}".strip(), parent, SpanKind.SERVER, attributes
    ) as span:

        async def sent(message: Any) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(StatusCode.ERROR)
            await send(message)

        await serve(scope, receive, sent)


def current() -> Any:
    """The trace context of the trace span now current (for a link to it later)."""
    from opentelemetry.trace import get_current_span

    return get_current_span().get_span_context()


@contextlib.contextmanager
def front_frame(contexts: Iterable[Any], records: int) -> Iterator[None]:
    """A server edge's front frame, a trace of its own linked to the requests it gathered
    (their trace contexts), not the child of the one that opened it; its put and its reply's
    wait are its children."""
    from opentelemetry.context import Context
    from opentelemetry.trace import Link

    links = [Link(c) for c in contexts if c is not None and c.is_valid]
    with _t().start_as_current_span(
        "front frame", Context(), links=links, attributes={"numerator.requests": records}
    ):
        yield


class TracedStream:
    """A stream whose puts are trace spans, each record stamped with its put's traceparent."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    async def put(self, records: Sequence[Any], shard: str | None = None) -> None:
        from opentelemetry.trace import SpanKind

        attributes = {"numerator.records": len(records)}
        with _t().start_as_current_span("put", kind=SpanKind.PRODUCER, attributes=attributes) as s:
            stamp = traceparent(s.get_span_context())
            for record in records:
                if isinstance(record, Record):
                    record.trace = stamp
            await self.stream.put(records, shard)


class TracedReplies:
    """Replies whose waits are trace spans: from the put's end to the reply in hand (pushed or
    read from the table)."""

    def __init__(self, replies: Replies) -> None:
        self.replies = replies

    def __getattr__(self, name: str) -> Any:
        return getattr(self.replies, name)

    def expect(self, key: str) -> None:
        self.replies.expect(key)

    def forget(self, key: str) -> None:
        self.replies.forget(key)

    async def publish(self, replies: Sequence[Any]) -> None:
        await self.replies.publish(replies)

    async def wait(self, key: str, timeout: float) -> Any:
        from opentelemetry.trace import SpanKind

        with _t().start_as_current_span("reply", kind=SpanKind.CONSUMER):
            return await self.replies.wait(key, timeout)


def delivered(via: str) -> None:
    """Say on the trace span now current (a reply's wait) how its reply came: push, table."""
    from opentelemetry.trace import get_current_span

    get_current_span().set_attribute("numerator.reply.via", via)


def traced(stream: Stream, replies: Replies) -> tuple[Stream, Replies]:
    """An edge's ports, their puts and waits traced: called once, where the edge is wired."""
    from typing import cast

    from infra.ports import Replies, Stream

    return cast(Stream, TracedStream(stream)), cast(Replies, TracedReplies(replies))


# The batcher ---------------------------------------------------------------------------------


def frame(
    entries: Sequence[Entry], shard: str, read: tuple[int, int]
) -> contextlib.AbstractContextManager[Any]:
    """The frame's trace span, around its apply: linked to the put of every record it serves,
    with its read (`read`: when the read that opened it began and ended, ns) and its collecting
    before as children. Nothing when this process does not trace."""
    return _frame(entries, shard, read) if ON else NOTHING


@contextlib.contextmanager
def _frame(entries: Sequence[Entry], shard: str, read: tuple[int, int]) -> Iterator[None]:
    from opentelemetry.trace import Link, SpanKind

    carried = [e.record.trace for e in entries if isinstance(e.record, Record) and e.record.trace]
    contexts = [c for c in map(parsed, carried) if c is not None]
    links = [Link(c) for c in contexts if c.trace_flags.sampled]
    if contexts and not links:  # none of the requests it serves is sampled: nor is it
        yield
        return
    began, read_end = read
    sent = [e.record.sent for e in entries if e.record is not None and e.record.sent]
    if sent:  # an idle read waits for records: the frame's read begins at the first's put
        began = min(read_end, max(began, int(min(sent) * 1e9)))
    attributes: dict[str, str | int] = {"numerator.shard": shard, "numerator.records": len(entries)}
    tracer = _t()
    with tracer.start_as_current_span(
        "frame", kind=SpanKind.CONSUMER, links=links, attributes=attributes, start_time=began
    ):
        tracer.start_span("read", start_time=began).end(end_time=read_end)
        tracer.start_span("collect", start_time=read_end).end()
        yield


def step(name: str) -> contextlib.AbstractContextManager[Any]:
    """A step of the frame now current (commit, publish) as its child; nothing when off."""
    return _t().start_as_current_span(name) if ON else NOTHING
