"""POST /counters/{name}/next: the hot route, and a raw ASGI path to it.

Every /next request costs a record, a wait and a reply, so the route skips what it does not need:
`FastPath` answers it in front of Starlette's middleware, router and Request objects (a quarter of
the CPU of a /next request in profiles), and hands every other request to the app unchanged.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import date
from typing import Any, NamedTuple
from urllib.parse import parse_qsl

import orjson
from starlette.applications import Starlette
from starlette.types import Receive, Scope, Send

from functions import bodies, validation
from functions.auth import address, pages_refused
from functions.edge import Edge
from functions.headers import Headers, read
from functions.lane import Lane
from functions.operations import Table
from functions.problems import (
    REPLY_PROBLEMS,
    Kind,
    Problem,
    bad_reply,
    invalid,
    unavailable,
)
from functions.requestlog import judged, logged
from functions.watch import ClientLeft, Watch
from infra.counters import NAME, template
from infra.errors import AwsRefused, ReplyTimeout, StreamFull, Unavailable
from infra.observe import traces
from infra.settings import loopback
from infra.wire import BadReply, Confirm, Record, Reply, Void, reply_key

log = logging.getLogger("numerator.edge")


def staying() -> bool:
    return False


async def take(
    edge: Edge,
    name: str,
    raw_count: str | None,
    key: str | None,
    timeout: float,
    who: str = "",
    left: Callable[[], bool] = staying,
) -> dict[str, Any]:
    """Put one record for `count` values of counter `name` and await its reply for up to
    `timeout` seconds; the response body, or a Problem. Counts every request and its status.
    `who` sent it (a key id or an address): the Idempotency-Keys it may send are limited.
    `left` says whether its client is known gone as its reply comes (then ClientLeft).
    One coroutine, not one per step: a /next is resumed through every frame of its chain each
    time it wakes."""
    metrics = edge.metrics
    metrics.next_requests.inc()
    retry_after = edge.settings.edge.retry_after_s
    try:
        count = checked(edge, name, raw_count, key, who)
        sent = time.time()
        try:
            if edge.front is not None and key is None:
                reply = await edge.front.take(name, count, timeout, who, left)
            else:
                budget = sent + edge.budget(timeout)
                record = Record(reply_key(), name, count, key, budget, sent, who)
                reply = await put_and_wait(edge, record, timeout, left)
        except FAILURES as exc:
            raise failed(exc, retry_after) from None
        finally:
            metrics.reply_wait_seconds.observe(time.time() - sent)
        body = answer(reply, count, retry_after)
    except Problem as problem:
        metrics.responses.inc(str(problem.status))
        raise
    metrics.responses.inc("200")
    return body


def checked(edge: Edge, name: str, raw_count: str | None, key: str | None, who: str) -> int:
    """The count a /next asks for, once its name, count and Idempotency-Key are valid and its
    sender may send another key (IDEMPOTENCY_KEYS_PER_S); else a Problem."""
    validation.name(name)
    count = validation.count(raw_count)
    validation.idempotency_key(key)
    if key is not None:
        wait = edge.key_rate.take(who)
        if wait:
            edge.metrics.requests_refused.inc("429")
            problem = Problem(
                Kind.TOO_MANY_IDEMPOTENCY_KEYS,
                f"at most {edge.settings.edge.idempotency_keys_per_s:g} Idempotency-Keys per "
                "second from one client (IDEMPOTENCY_KEYS_PER_S)",
            )
            problem.headers["Retry-After"] = str(max(1, round(wait + 0.5)))
            raise problem
    return count


FAILURES = (Unavailable, AwsRefused, ReplyTimeout, BadReply)
"""What awaiting a reply may raise: `failed` says which problem each stands for."""
NEXT_QUERY = frozenset(bodies.NextQuery.__struct_fields__)
"""The query parameters /next takes: its model's (the OpenAPI document's), and no other."""


def failed(exc: Exception, retry_after: int) -> Problem:
    """The problem a failed wait for a reply stands for: 503 (the stream would not take the
    record), 504 (no reply in time), 502 (an unreadable reply)."""
    if isinstance(exc, StreamFull):
        return unavailable(f"the batcher is saturated: {exc}", retry_after)
    if isinstance(exc, AwsRefused):  # the same call would be refused again: no Retry-After
        return Problem(Kind.BACKEND_REFUSED, f"{exc.code}: {exc}")
    if isinstance(exc, Unavailable):
        return unavailable(str(exc), retry_after)
    if isinstance(exc, ReplyTimeout):
        return Problem(Kind.REPLY_TIMEOUT, str(exc))
    return bad_reply(str(exc))


async def replied(work: Awaitable[Reply], retry_after: int) -> Reply:
    """The reply `work` awaits, or the problem its failure stands for (`failed`)."""
    try:
        return await work
    except FAILURES as exc:
        raise failed(exc, retry_after) from None


async def put_and_wait(
    edge: Edge, record: Record | Void | Confirm, timeout: float, left: Callable[[], bool] = staying
) -> Reply:
    """Put a record for one request and await its reply, `timeout` seconds from the put's start
    (a Lambda container's first put makes its AWS clients: its wait is that much shorter, so
    that it still answers before the invocation ends); ClientLeft (its record given up) when
    its client is known gone (`left`) as the reply comes."""
    began = time.monotonic()
    edge.replies.expect(record.key)
    await put_within(edge, record, timeout)
    edge.metrics.records_put.inc()
    put = time.monotonic()
    durable = edge.stream.durable
    if durable:  # on the AWS path: the hops a request takes (numerator_hop_seconds)
        edge.metrics.hop_seconds.observe("put", put - began)
    try:
        reply = await edge.replies.wait(record.key, max(0.0, timeout - put + began))
    except (ReplyTimeout, AwsRefused) as exc:  # no one will read what comes
        if isinstance(record, Record):
            await edge.give_up(record)
        if isinstance(exc, ReplyTimeout):  # the whole wait, not what the put left of it
            raise ReplyTimeout(f"no reply within {timeout:g}s") from None
        raise
    except asyncio.CancelledError:  # the client went away
        if isinstance(record, Record):
            edge.give_up_later(record)
        raise
    if durable:
        edge.metrics.hop_seconds.observe("reply", time.monotonic() - put)
    if isinstance(record, Record) and left():
        edge.give_up_later(record)
        raise ClientLeft
    return reply


async def put_within(edge: Edge, record: Record | Void | Confirm, timeout: float) -> None:
    """Put a request's record, on a durable stream within `timeout` seconds (one that does not
    answer is a ReplyTimeout, as a reply that does not come: a 504 before a Lambda invocation
    ends, not a hang)."""
    # A put to a durable stream runs to its end in a thread, even when its request is cancelled
    # meanwhile (its client gone) or stops waiting for it: the cancel is put only after it, or
    # it could overtake the record on the stream and find nothing to cancel. A memory stream's
    # put never waits; the machine's batcher's (hub) is held to TAKEN_S.
    putting = asyncio.ensure_future(edge.stream.put((record,))) if edge.stream.durable else None
    try:
        if putting is None:
            await edge.stream.put((record,))
        else:
            async with asyncio.timeout(timeout):
                await asyncio.shield(putting)
    except (Unavailable, AwsRefused):
        edge.replies.forget(record.key)
        raise
    except TimeoutError:  # the put goes on: its record, if it lands, is given up after it
        edge.replies.forget(record.key)
        if isinstance(record, Record):
            edge.give_up_later(record, putting)
        raise ReplyTimeout(f"the stream did not take the record within {timeout:g}s") from None
    except asyncio.CancelledError:  # the client went away while the record was being put
        if isinstance(record, Record):
            edge.give_up_later(record, putting)
        raise


def answer(reply: Reply, count: int, retry_after: int) -> dict[str, Any]:
    """The body for a reply, or the problem it stands for."""
    if reply.error is not None:
        raise answer_problem(reply, retry_after)
    assert reply.day is not None
    if count == 1 and reply.first == reply.last:
        return one_value(reply.counter, reply.first, reply.template, reply.day)
    render = template(reply.template).render
    values = [
        {"value": v, "formatted": render(v, reply.day)} for v in range(reply.first, reply.last + 1)
    ]
    return {"counter": reply.counter, "first": reply.first, "last": reply.last, "values": values}


def one_value(counter: str, value: int, text: str, day: date) -> dict[str, Any]:
    """The body of an answer of one value, rendered by the counter's template `text`."""
    return {"counter": counter, "value": value, "formatted": template(text).render(value, day)}


def unexpected() -> Problem:
    """The 500 for an error no one expected in /next, logged with its traceback."""
    log.exception("unexpected error in /next")
    return Problem(Kind.INTERNAL, "an unexpected error; it has been logged")


async def bodied(receive: Receive) -> bool:
    """Whether the request's first message carries a body, or says more is coming."""
    message = await receive()
    return bool(message.get("body")) or bool(message.get("more_body"))


def parameters(raw: bytes) -> dict[str, str]:
    """A query string's parameters, each given once (a 422 names one given more often: which
    of two `count`s counts is no one's guess)."""
    pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
    found = dict(pairs)
    if len(found) != len(pairs):
        name = validation.repeated(pairs)
        raise invalid(name[:80], f"the query parameter {name[:80]!r} is given more than once")
    return found


def answer_problem(reply: Reply, retry_after: int) -> Problem:
    """The problem an error reply stands for."""
    assert reply.error is not None
    kind = REPLY_PROBLEMS.get(reply.error)
    if kind is None:
        return bad_reply(f"the batcher answered an error this edge does not know: {reply.error}")
    if kind is Kind.UNAVAILABLE:
        return unavailable(reply.detail or reply.error.value, retry_after)
    problem = Problem(kind, reply.detail)
    if kind.status == 503:
        problem.headers["Retry-After"] = str(retry_after)
    return problem


JSON_HEADERS = [(b"content-type", b"application/json")]


class NextRequest(NamedTuple):
    """A POST /counters/{name}/next as admitted: its headers, who sent it, the counter's name
    and the query's parameters."""

    heads: Headers
    who: str
    counter: str
    query: dict[str, str]


class FastPath:
    """ASGI middleware in front of the app: checks every request's header size and API key
    (what each route needs: `table`, the app's routes), answers POST /counters/{name}/next (the
    table's fast operation) itself, and passes the rest to `app`."""

    def __init__(self, app: Starlette, table: Table, edge: Edge | None = None) -> None:
        self.app = app
        self.table = table
        self.edge = edge
        self.watch = Watch()
        self.lane: Lane | None = None
        self.lane_known = (
            False  # whether `lane` was made (or found not wanted): at the first request
        )

    def made_lane(self) -> None:
        """The lane of the edge, once it is known (a server's app gets it in its lifespan)."""
        edge = self.edge or getattr(self.app.state, "edge", None)
        if edge is None:
            return
        self.edge, self.lane_known = edge, True
        if edge.lane:
            abandon = edge.abandon
            self.lane = Lane(
                functools.partial(put_and_wait, edge), edge.timeout, edge.budget, abandon
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if traces.ON:  # the one test a request pays when this process does not trace
            await traces.request(functools.partial(logged, self.serve), scope, receive, send)
            return
        if not self.lane_known:
            self.made_lane()
        if self.lane is not None and not scope["query_string"]:
            counter = self.table.next_counter(scope["method"], scope["path"])
            if counter is not None:
                heads = read(scope)
                if self.plain(scope, heads, counter):
                    await self.lane_next(scope, receive, send, counter, heads)
                    return
        await logged(self.serve, scope, receive, send)

    def plain(self, scope: Scope, heads: Headers, counter: str) -> bool:
        """Whether the lane may take this /next: one value, no Idempotency-Key, no body, a
        valid name, headers within their limit, and, where loopback clients are trusted
        without a key, none of the marks of a web page (AUTH=keys: the guard looks). Any other
        `serve` answers (or refuses) in full."""
        edge = self.edge
        assert edge is not None
        if (
            heads.idempotency_key is not None
            or heads.length
            or heads.chunked
            or heads.repeated is not None
            or heads.size > edge.settings.edge.max_header_bytes
            or NAME.fullmatch(counter) is None
        ):
            return False
        if scope.get("http_version") == "2":  # a body may come without a length: `next` reads
            return False
        return (
            heads.plain
            or edge.guard is not None
            or not (edge.settings.trusts_loopback and loopback(address(scope)))
        )

    async def lane_next(
        self, scope: Scope, receive: Receive, send: Send, counter: str, heads: Headers
    ) -> None:
        """Answer a plain POST /counters/{name}/next through the lane, as `serve` and `next`
        would: admitted, held (edge.flight) until its answer is handed to the server, logged if
        it failed or was slow."""
        began = time.perf_counter()
        edge = self.edge
        assert edge is not None
        if edge.guard is None:
            who = address(scope)
        else:
            try:
                needed = self.table.need(scope["method"], scope["path"], counter)
                who = await edge.guard.admit(scope, needed, heads)
            except Problem as problem:
                await problem.response(scope["path"])(scope, receive, send)
                judged(scope, problem.status, time.perf_counter() - began)
                return
        status = 0
        epoch = edge.flight.begin()
        try:
            status = await self.laned(edge, scope, receive, send, counter, who)
        finally:
            edge.flight.end(epoch)
            judged(scope, status, time.perf_counter() - began)

    async def laned(
        self, edge: Edge, scope: Scope, receive: Receive, send: Send, counter: str, who: str
    ) -> int:
        """A value of `counter` from the lane, answered; the status it was answered with (0:
        none, its client gone)."""
        lane, watch, metrics = self.lane, self.watch, edge.metrics
        assert lane is not None
        this = asyncio.current_task(watch.loop or watch.start())
        assert this is not None
        metrics.next_requests.inc()
        sent = time.time()
        future = lane.take(counter, who)
        try:
            watch.add(this, receive)
            try:
                reply, value = await future
                left = watch.left(this)  # asked before `done` ends the watch
            finally:
                watch.done(this)
                metrics.reply_wait_seconds.observe(time.time() - sent)
            if left:  # its client left as its value came: not sent to a closed connection
                lane.gone(counter, future, who)
                metrics.clients_gone.inc()
                return 0
            if reply.error is not None:
                raise answer_problem(reply, edge.settings.edge.retry_after_s)
            assert reply.day is not None
            body = orjson.dumps(one_value(counter, value, reply.template, reply.day))
            metrics.responses.inc("200")
            await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
            await send({"type": "http.response.body", "body": body})
            return 200
        except asyncio.CancelledError:
            lane.gone(counter, future, who)
            if not watch.quieted(this):
                raise
            metrics.clients_gone.inc()  # the client went away: its value is never taken, or void
            return 0
        except (*FAILURES, Problem) as exc:
            said = (
                exc if isinstance(exc, Problem) else failed(exc, edge.settings.edge.retry_after_s)
            )
            metrics.responses.inc(str(said.status))
        except Exception:
            said = unexpected()
        await said.response(scope["path"])(scope, receive, send)
        return said.status

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        edge: Edge = self.edge or self.app.state.edge
        heads = read(scope)
        counter = self.table.next_counter(scope["method"], scope["path"])
        try:
            who = await self.admit(edge, scope, heads, counter)
            query = parameters(scope["query_string"]) if scope["query_string"] else {}
        except Problem as problem:
            await problem.response(scope["path"])(scope, receive, send)
            return
        if counter is None:
            scope["numerator.who"] = who  # for the audit trail of a void
            await self.app(scope, receive, send)
            return
        # The request is held (edge.flight: what the ledger lists `unsure` if this process dies)
        # until its answer is handed to the server, not only until its values came.
        epoch = edge.flight.begin()
        try:
            await self.next(edge, scope, receive, send, NextRequest(heads, who, counter, query))
        finally:
            edge.flight.end(epoch)

    async def next(
        self,
        edge: Edge,
        scope: Scope,
        receive: Receive,
        send: Send,
        request: NextRequest,
    ) -> None:
        """Answer POST /counters/{name}/next: its values, or its problem. If its client goes
        away meanwhile (`watch`), the work is cancelled, and a record it put is cancelled on
        the stream (its values are never allocated, or are void, abandoned)."""
        heads, who, counter, query = request
        path = scope["path"]
        watch = self.watch
        this = asyncio.current_task(watch.loop or watch.start())
        assert this is not None
        try:
            for name in query:  # `?cout=5` would have been one value
                if name not in NEXT_QUERY:
                    raise invalid(name[:80], f"/next takes no query parameter {name[:80]!r}")
            if heads.length > edge.settings.edge.max_body_bytes:
                raise Problem(Kind.BODY_TOO_LARGE, "/next takes no body")
            # {"count": 5} would have been one value. HTTP/2 frames a body without saying its
            # length in a header: its first message is read to tell.
            framed = scope.get("http_version") == "2" and await bodied(receive)
            if heads.length or heads.chunked or framed:
                raise Problem(
                    Kind.INVALID_REQUEST,
                    "/next takes no body: ask for several values with ?count=N",
                    field="body",
                )
            key = None if heads.idempotency_key is None else heads.idempotency_key.decode("latin-1")
            timeout = edge.timeout(scope.get("aws.context"))
            watch.add(this, receive)
            try:
                left = functools.partial(watch.left, this)
                body = await take(edge, counter, query.get("count"), key, timeout, who, left)
            finally:
                watch.done(this)
        except ClientLeft:
            edge.metrics.clients_gone.inc()
            return
        except asyncio.CancelledError:
            if not watch.quieted(this):
                raise
            edge.metrics.clients_gone.inc()  # the client went away: its record is cancelled
            return
        except Problem as problem:
            await problem.response(path)(scope, receive, send)
            return
        except Exception:
            await unexpected().response(path)(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
        await send({"type": "http.response.body", "body": orjson.dumps(body)})

    async def admit(self, edge: Edge, scope: Scope, heads: Headers, counter: str | None) -> str:
        """Who sent the request (a key id, or the client's address), if it may go on: its
        headers are not too large and its key (AUTH=keys) allows it; else a Problem."""
        limit = edge.settings.edge.max_header_bytes
        if heads.size > limit:
            edge.metrics.requests_refused.inc("431")
            raise Problem(
                Kind.HEADERS_TOO_LARGE, f"the request headers may be at most {limit} bytes"
            )
        if heads.repeated is not None:
            edge.metrics.requests_refused.inc("400")
            name = heads.repeated.decode("latin-1").title()  # idempotency-key: Idempotency-Key
            raise Problem(Kind.REPEATED_HEADER, f"{name} came more than once: send it once")
        if edge.guard is not None:
            needed = self.table.need(scope["method"], scope["path"], counter)
            return await edge.guard.admit(scope, needed, heads)
        sender = address(scope)
        if heads.plain or not (edge.settings.trusts_loopback and loopback(sender)):
            return sender
        refused = pages_refused(scope)
        if refused is not None:
            edge.metrics.requests_refused.inc("403")
            raise refused
        return sender
