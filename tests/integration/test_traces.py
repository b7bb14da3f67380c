"""OpenTelemetry traces of one /next on each path, caught by the SDK's in-memory exporter: the
request's trace span at the edge, its record's put (the record carries it as a traceparent), the
wait for its reply; the batcher's frame, linked to the put (links, not a parent: a frame serves
many requests), with its read, collecting, commit and publish. Embedded in process, the server
edge and the Lambda edge (API Gateway's event through Mangum) against moto and a real batcher."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler
from opentelemetry.trace import SpanKind

from infra.adapters.pushkeys import new_key
from infra.observe import otel, traces
from infra.settings import Settings
from numerator.stack import BatcherStack, EdgeStack, EmbeddedStack
from tests.lambdas import Container, batcher_on, body, environment, event

NEXT = "POST /counters/{name}/next"
CLIENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
"""A client's own traceparent (W3C's example): the request's trace span is its child."""


def tracing(sampler: Sampler) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        sampler=otel.Linked(sampler), span_limits=SpanLimits(max_links=otel.LINKS)
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traces.install(provider)
    try:
        yield exporter
    finally:
        traces.uninstall()


@pytest.fixture
def traced() -> Iterator[InMemorySpanExporter]:
    """This process traces every request into an in-memory exporter while the test runs."""
    yield from tracing(ALWAYS_ON)


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def sid(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> dict[str, ReadableSpan]:
    own = sid(parent)
    return {s.name: s for s in spans if s.parent is not None and s.parent.span_id == own}


def linking(spans: list[ReadableSpan], to: ReadableSpan) -> list[ReadableSpan]:
    """The trace spans with a link to `to`."""
    own = sid(to)
    return [s for s in spans if any(link.context.span_id == own for link in s.links)]


async def linked(exporter: InMemorySpanExporter, to: ReadableSpan) -> ReadableSpan:
    """The one trace span linked to `to`, once it has ended: the batcher's frame that served
    the record a put put ends after its publish, a front frame after its split, and the reply
    may be in hand a moment before either."""
    deadline = time.monotonic() + 5
    while not (found := linking(list(exporter.get_finished_spans()), to)):
        assert time.monotonic() < deadline, f"no trace span linked to {to.name}"
        await asyncio.sleep(0.02)
    [one] = found
    return one


def via(reply: ReadableSpan) -> object:
    """How a reply's wait ended: pushed, or read from the reply table."""
    return (reply.attributes or {}).get("numerator.reply.via")


def assert_frame(spans: list[ReadableSpan], frame: ReadableSpan) -> None:
    assert frame.kind is SpanKind.CONSUMER and frame.parent is None  # a trace of its own
    steps = children(spans, frame)
    assert {"read", "collect", "commit", "publish"} <= set(steps), steps
    assert frame.start_time is not None and frame.end_time is not None
    for step in steps.values():
        assert step.start_time is not None and step.end_time is not None
        assert frame.start_time <= step.start_time <= step.end_time <= frame.end_time
    assert steps["read"].end_time <= steps["commit"].start_time  # type: ignore[operator]
    assert steps["commit"].end_time <= steps["publish"].start_time  # type: ignore[operator]


def request_put_reply(spans: list[ReadableSpan]) -> tuple[ReadableSpan, ReadableSpan]:
    """The /next's trace span and its put, checked: the put and the reply's wait are its
    children, in that order."""
    [request] = named(spans, NEXT)
    assert request.kind is SpanKind.SERVER
    assert request.attributes is not None
    assert request.attributes["http.response.status_code"] == 200
    steps = children(spans, request)
    put, reply = steps["put"], steps["reply"]
    assert put.kind is SpanKind.PRODUCER and reply.kind is SpanKind.CONSUMER
    assert put.end_time <= reply.start_time  # type: ignore[operator]
    return request, put


async def test_one_next_embedded(
    traced: InMemorySpanExporter, settings: Settings, name: str
) -> None:
    async with EmbeddedStack(settings) as stack:
        transport = httpx.ASGITransport(app=stack.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            assert (await client.post("/counters", json={"name": name})).status_code == 201
            traced.clear()
            answer = await client.post(f"/counters/{name}/next", headers={"traceparent": CLIENT})
            assert answer.status_code == 200
            spans = list(traced.get_finished_spans())
            request, put = request_put_reply(spans)
            assert request.parent is not None and request.parent.span_id == 0x00F067AA0BA902B7
            assert request.context is not None
            assert request.context.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
            frame = await linked(traced, put)
    assert_frame(list(traced.get_finished_spans()), frame)


async def test_one_next_on_the_server_edge_through_a_front_frame_and_alone(
    traced: InMemorySpanExporter, aws: tuple[Settings, Any], name: str
) -> None:
    """Without an Idempotency-Key a request goes through a front frame: the frame's trace span
    links to each request it gathered, its put is its child; with one, the put is the request's
    own child. Each put is linked from the batcher's frame: the record carried it on Kinesis.
    The front frame's reply came pushed (its record names the edge's inbox), the keyed one's
    from the reply table (its record names none)."""
    # the edge's first table read half a beat after the batcher's: the push comes before it
    own = aws[0].but(reply_timeout_s=10.0, reply_lag_ms=100.0, push_keys=new_key())
    async with BatcherStack(own), EdgeStack(own) as edge:
        transport = httpx.ASGITransport(app=edge.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            assert (await client.post("/counters", json={"name": name})).status_code == 201
            traced.clear()
            assert (await client.post(f"/counters/{name}/next")).status_code == 200
            spans = list(traced.get_finished_spans())
            [request] = named(spans, NEXT)
            front = await linked(traced, request)
            assert front.name == "front frame" and front.parent is None
            spans = list(traced.get_finished_spans())
            put, reply = children(spans, front)["put"], children(spans, front)["reply"]
            assert via(reply) == "push"
            frame = await linked(traced, put)
            assert_frame(list(traced.get_finished_spans()), frame)

            traced.clear()
            keyed = {"Idempotency-Key": f"{name}-1"}
            assert (await client.post(f"/counters/{name}/next", headers=keyed)).status_code == 200
            request, put = request_put_reply(list(traced.get_finished_spans()))
            assert via(children(list(traced.get_finished_spans()), request)["reply"]) == "table"
            frame = await linked(traced, put)
    assert_frame(list(traced.get_finished_spans()), frame)


def test_one_next_on_the_lambda_edge(
    traced: InMemorySpanExporter,
    aws: tuple[Settings, Any],
    name: str,
) -> None:
    """API Gateway's event through Mangum, as Lambda runs it; the client's traceparent, which
    API Gateway passes on as a header, is the request's parent."""
    with batcher_on(aws[0]) as settings:
        lam = Container(environment(settings))
        try:
            _, put = one_next(lam, traced, name)
            frame = asyncio.run(linked(traced, put))
        finally:
            lam.close()
    assert_frame(list(traced.get_finished_spans()), frame)


def one_next(
    lam: Container, traced: InMemorySpanExporter, name: str
) -> tuple[list[ReadableSpan], ReadableSpan]:
    """A counter made, and one /next, with a client's traceparent, through the container: the
    trace spans then, and the /next's put."""
    assert lam(event("http-api-create.json", name))["statusCode"] == 201
    traced.clear()
    asked = event("http-api-next.json", name)
    asked["headers"]["traceparent"] = CLIENT
    answer = lam(asked)
    assert answer["statusCode"] == 200, answer
    assert body(answer)["value"] == 1
    spans = list(traced.get_finished_spans())
    request, put = request_put_reply(spans)
    assert request.parent is not None and request.parent.span_id == 0x00F067AA0BA902B7
    assert via(children(spans, request)["reply"]) == "table"  # a container takes no pushes
    return spans, put


async def test_a_frame_is_recorded_when_a_request_it_served_is(
    settings: Settings, name: str
) -> None:
    """Sampling (OTEL_TRACES_SAMPLER) decides per request; the frame, a trace of its own, is
    recorded if any request it served was: none is, so none is."""
    for exporter in tracing(ParentBased(ALWAYS_OFF)):
        async with EmbeddedStack(settings) as stack:
            transport = httpx.ASGITransport(app=stack.app())
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1"
            ) as client:
                await client.post("/counters", json={"name": name})
                assert (await client.post(f"/counters/{name}/next")).status_code == 200
                sampled = await client.post(
                    f"/counters/{name}/next", headers={"traceparent": CLIENT}
                )
                assert sampled.status_code == 200
        spans = list(exporter.get_finished_spans())
        names = {NEXT, "put", "reply", "frame", "read", "collect", "commit", "publish"}
        assert {s.name for s in spans} == names, spans
        assert len(named(spans, NEXT)) == 1 and len(named(spans, "frame")) == 1


async def test_a_large_frame_links_every_request_it_served(
    traced: InMemorySpanExporter, settings: Settings, name: str
) -> None:
    """A frame of more records than the SDK keeps links by default (128): every request's put
    is still linked from its frame (otel.LINKS)."""
    fixed = settings.but(frame_policy="fixed", back_frame_ms=200.0)
    async with EmbeddedStack(fixed) as stack:
        transport = httpx.ASGITransport(app=stack.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            assert (await client.post("/counters", json={"name": name})).status_code == 201
            answers = await asyncio.gather(
                *(client.post(f"/counters/{name}/next") for _ in range(300))
            )
            assert [a.status_code for a in answers] == [200] * 300
            deadline = time.monotonic() + 5
            spans = list(traced.get_finished_spans())
            while not all(linking(spans, put) for put in named(spans, "put")):
                assert time.monotonic() < deadline, "a put linked from no frame"
                await asyncio.sleep(0.05)  # the last frame ends after its publish
                spans = list(traced.get_finished_spans())
    frames = named(spans, "frame")
    assert max(len(f.links) for f in frames) > 128, [len(f.links) for f in frames]
    assert sum(len(f.links) for f in frames) == len(named(spans, "put")) == 300
