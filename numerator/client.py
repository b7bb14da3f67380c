"""numerator's Python client: `Client` and `AsyncClient`, whose retries never take a second value.

    from numerator import Client

    with Client("http://127.0.0.1:8080") as numerator:      # or NUMERATOR_URL, NUMERATOR_KEY
        invoice = numerator.next("inv")                       # Values(first=42, formatted='INV-…')
        batch = numerator.next("inv", count=50)               # 50 consecutive values

Every `next` carries an Idempotency-Key (the caller's, or one the client makes), and every retry
of it sends the same key: after a timeout, a dropped connection, a 502, a 503 or a 429 (after its
`Retry-After`) or a 504, the service answers the retry with the values the first try took, never
new ones. Retries wait a jittered, doubling backoff, and all the tries of one call end within its
`deadline`. A problem answer (RFC 9457) is raised as a `StatusError` subclass by status, carrying
the problem's `type`, `title` and `detail`. The exceptions, all importable from `numerator` too:

    ClientError
    ├── Unreachable      no answer within the deadline
    ├── BadURL           not an http:// or https:// URL (also a ValueError)
    └── StatusError      an RFC 9457 answer
        ├── BadRequest   400, 413, 415, 422
        ├── Unauthorized 401
        ├── Forbidden    403
        ├── NotFound     404
        ├── Conflict     409
        ├── TooMany      429, after the retries
        └── ServiceUnavailable 502, 503, 504, after the retries

Each call is described once (`Call`: what to send, how to read the answer) and sent by either
client; only the sending (and the sleeping between tries) differs between the two.
"""

from __future__ import annotations

import email.utils
import ipaddress
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from types import TracebackType
from typing import Any, Generic, TypeVar

import httpx

__all__ = [
    "DEADLINE_S",
    "DEFAULT_URL",
    "TIMEOUT_S",
    "AsyncClient",
    "BadRequest",
    "BadURL",
    "Client",
    "ClientError",
    "Conflict",
    "CounterInfo",
    "Forbidden",
    "Marked",
    "NotFound",
    "ServiceUnavailable",
    "StatusError",
    "TooMany",
    "Unauthorized",
    "Unreachable",
    "Value",
    "Values",
]

DEFAULT_URL = "http://127.0.0.1:8080"
TIMEOUT_S = 30.0
"""One try's limit: longer than the service's REPLY_TIMEOUT_S (25 s), so that a value that takes
long comes back as the service's 504 rather than as the client giving up."""
DEADLINE_S = 60.0
"""All the tries of one call end within this."""
REFUSED_DEADLINE_S = 3.0
"""All the tries of one call end within this when nothing can answer: the connection to this
machine was refused (nothing listens there; a restarting service is back within it), or the
host's name does not resolve. Either way no request reached a service, and a person or a
program is better told what to check now than after a minute of retries."""
FIRST_WAIT_S = 0.1
LONGEST_WAIT_S = 5.0
RETRIED = frozenset({429, 502, 503, 504})
"""Statuses a retry may cure: nothing was allocated (429, 503), or what was is found again by
the Idempotency-Key (502, 504)."""

T = TypeVar("T")


class ClientError(Exception):
    """Anything the client raises: a problem answer, or no answer at all."""


class Unreachable(ClientError):
    """No answer within the deadline: the service could not be reached, or did not answer."""


class BadURL(ClientError, ValueError):
    """The service's URL is not one the client can send to (no http:// or https://)."""


class StatusError(ClientError):
    """An RFC 9457 problem the service answered: `status`, `type` (stable, see
    docs/problems.md), `title`, `detail`, the `field` it names (a 422's), and the whole body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.type = str(body.get("type", "about:blank"))
        self.title = str(body.get("title", ""))
        self.detail = str(body.get("detail", ""))
        self.field = str(body["field"]) if body.get("field") is not None else None
        self.body = body
        detail = self.detail
        if self.field and detail.startswith("must"):
            detail = f"{self.field} {detail}"
        elif self.field:
            detail = f"{self.field}: {detail}" if detail else self.field
        super().__init__(f"{status} {self.title}{': ' + detail if detail else ''}")


class BadRequest(StatusError):
    """400, 413, 415, 422: the request is wrong; sending it again will not help."""


class Unauthorized(StatusError):
    """401: no API key, or one the service does not know."""


class Forbidden(StatusError):
    """403: the API key may not do this (or a web page acts for a local caller)."""


class NotFound(StatusError):
    """404: no such counter (or key)."""


class Conflict(StatusError):
    """409: the counter exists, the value was not issued yet, or is void already."""


class TooMany(StatusError):
    """429: too many Idempotency-Keys from this client; retried until the deadline."""


class ServiceUnavailable(StatusError):
    """502, 503, 504: the service could not answer in time; retried until the deadline."""


PROBLEMS: dict[int, type[StatusError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: BadRequest,
    415: BadRequest,
    422: BadRequest,
    429: TooMany,
    502: ServiceUnavailable,
    503: ServiceUnavailable,
    504: ServiceUnavailable,
}


def _problem(response: httpx.Response) -> StatusError:
    """The exception for a 4xx or 5xx answer."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"title": response.reason_phrase, "detail": response.text[:200]}
    return PROBLEMS.get(response.status_code, StatusError)(response.status_code, body)


@dataclass(frozen=True, slots=True)
class Value:
    value: int
    formatted: str


@dataclass(frozen=True, slots=True)
class Values:
    """What `next` took: `values` in order; `value` and `formatted` are the first's (the only
    one's, for count=1); `idempotency_key` is the key a retry of this call sends."""

    counter: str
    values: tuple[Value, ...]
    idempotency_key: str

    @property
    def value(self) -> int:
        return self.values[0].value

    @property
    def formatted(self) -> str:
        return self.values[0].formatted

    @property
    def first(self) -> int:
        return self.values[0].value

    @property
    def last(self) -> int:
        return self.values[-1].value

    @classmethod
    def from_json(cls, body: dict[str, Any], key: str) -> Values:
        if "values" in body:
            values = tuple(Value(v["value"], v["formatted"]) for v in body["values"])
        else:
            values = (Value(body["value"], body["formatted"]),)
        return cls(body["counter"], values, key)


@dataclass(frozen=True, slots=True)
class CounterInfo:
    """A counter's settings; `value` and `period`, the last value handed out in the current
    period (None before the first), where the service said them (`get`)."""

    name: str
    template: str = "{value}"
    start: int = 1
    reset: str = "never"
    timezone: str = "UTC"
    retention_days: int | None = None
    confirm: str = "none"
    value: int | None = None
    period: str | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> CounterInfo:
        return cls(
            body["name"],
            body["template"],
            body["start"],
            body["reset"],
            body["timezone"],
            body.get("retention_days"),
            body.get("confirm", "none"),
            body.get("value"),
            body.get("period"),
        )


@dataclass(frozen=True, slots=True)
class Marked:
    """What `void` or `confirm` did: the ranges (first, last) of `counter` in `period`."""

    counter: str
    period: str
    ranges: tuple[tuple[int, int], ...]
    reason: str | None = None

    @classmethod
    def reader(cls, what: str) -> Callable[[dict[str, Any]], Marked]:
        def read(body: dict[str, Any]) -> Marked:
            ranges = tuple((r["first"], r["last"]) for r in body[what])
            return cls(body["counter"], body["period"], ranges, body.get("reason"))

        return read


def _as_sent(body: Any) -> Any:
    """An answer read as the JSON (or text) the service sent."""
    return body


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One call, as either client sends it: the request, the answer's reader, and the
    statuses that are answers rather than problems (`ok`)."""

    method: str
    path: str
    read: Callable[[Any], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    ok: tuple[int, ...] = ()
    text: bool = False

    def request(self, left: float, timeout: float) -> dict[str, Any]:
        """httpx.request's arguments for one try, with `left` seconds to the deadline."""
        return {
            "method": self.method,
            "url": self.path,
            "params": self.params,
            "json": self.json,
            "headers": self.headers,
            "timeout": max(0.05, min(timeout, left)),
        }

    def answer(self, response: httpx.Response) -> T:
        if response.status_code >= 400 and response.status_code not in self.ok:
            raise _problem(response)
        if self.text and response.is_success:
            return self.read(response.text)
        return self.read(response.json() if response.content else None)


def _period(body: dict[str, Any], period: str | None) -> dict[str, Any]:
    return {**body, "period": period} if period is not None else body


def _marking(values: Iterable[int] | None, first: int | None, last: int | None) -> dict[str, Any]:
    if values is not None:
        if first is not None or last is not None:
            raise ValueError("give values, or first (and last), not both")
        return {"values": list(values)}
    if first is None:
        raise ValueError("give values, or first (and last)")
    return {"first": first, "last": last if last is not None else first}


class Calls:
    """Every call the clients make, described."""

    @staticmethod
    def next(counter: str, count: int, key: str | None) -> Call[Values]:
        key = key or f"nmr-{uuid.uuid4().hex}"
        return Call(
            "POST",
            f"/counters/{counter}/next",
            lambda body: Values.from_json(body, key),
            params={"count": count} if count != 1 else {},
            headers={"Idempotency-Key": key},
        )

    @staticmethod
    def create(name: str, fields: dict[str, Any]) -> Call[CounterInfo]:
        body = {"name": name, **{k: v for k, v in fields.items() if v is not None}}
        return Call("POST", "/counters", CounterInfo.from_json, json=body)

    @staticmethod
    def get(name: str) -> Call[CounterInfo]:
        return Call("GET", f"/counters/{name}", CounterInfo.from_json)

    @staticmethod
    def page(limit: int, after: str | None) -> Call[tuple[list[CounterInfo], str | None]]:
        params: dict[str, Any] = {"limit": limit}
        if after:
            params["after"] = after
        return Call(
            "GET",
            "/counters",
            lambda body: ([CounterInfo.from_json(c) for c in body["counters"]], body["next"]),
            params=params,
        )

    @staticmethod
    def void(
        counter: str,
        reason: str,
        values: Iterable[int] | None,
        first: int | None,
        last: int | None,
        period: str | None,
    ) -> Call[Marked]:
        body = _period({**_marking(values, first, last), "reason": reason}, period)
        return Call("POST", f"/counters/{counter}/void", Marked.reader("voided"), json=body)

    @staticmethod
    def confirm(
        counter: str,
        values: Iterable[int] | None,
        first: int | None,
        last: int | None,
        period: str | None,
    ) -> Call[Marked]:
        body = _period(_marking(values, first, last), period)
        return Call("POST", f"/counters/{counter}/confirm", Marked.reader("confirmed"), json=body)

    @staticmethod
    def report(counter: str, period: str | None) -> Call[dict[str, Any]]:
        params = {"period": period} if period is not None else {}
        return Call("GET", f"/counters/{counter}/report", _as_sent, params=params)


class Retry:
    """When to try a call again, and how long to wait first: a doubling backoff from
    FIRST_WAIT_S to LONGEST_WAIT_S with full jitter, or the answer's Retry-After; never past
    the call's deadline."""

    def __init__(self, deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.began = clock()
        self.ends = self.began + deadline
        self.tries = 0

    def left(self) -> float:
        return self.ends - self.clock()

    def cut(self, deadline: float) -> None:
        """End the tries `deadline` seconds after the first, if that is sooner."""
        self.ends = min(self.ends, self.began + deadline)

    def wait(self, response: httpx.Response | None) -> float | None:
        """Seconds to wait before the next try; None: do not try again."""
        if response is not None and response.status_code not in RETRIED:
            return None
        wait = random.uniform(0, min(LONGEST_WAIT_S, FIRST_WAIT_S * 2**self.tries))
        self.tries += 1
        after = _retry_after(response.headers.get("Retry-After")) if response is not None else None
        if after is not None:
            wait = after
        return wait if wait < self.left() else None


def _retry_after(header: str | None) -> float | None:
    """The seconds a Retry-After asks for: delay-seconds, or an HTTP-date (RFC 9110 10.2.3),
    from now (0 for a date past); None when absent or unreadable."""
    if header is None:
        return None
    header = header.strip()
    if header.isascii() and header.isdigit():
        return float(header)
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # RFC 9110's dates are GMT; "-0000" parses as naive
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - time.time())


def _settings(url: str | None, key: str | None) -> tuple[str, dict[str, str]]:
    url = _checked_url(url or os.environ.get("NUMERATOR_URL") or DEFAULT_URL)
    key = key if key is not None else os.environ.get("NUMERATOR_KEY")
    return url, ({"Authorization": f"Bearer {key}"} if key else {})


def _checked_url(url: str) -> str:
    """`url` without a trailing slash, if it is one the client can send to; else BadURL, at
    once (`localhost:8080` would otherwise be retried as the scheme 'localhost')."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.strip("/"):
        guess = f"; did you mean http://{url}?" if not sep else ""
        raise BadURL(f"the service's URL must start with http:// or https://, not {url!r}{guess}")
    return url.rstrip("/")


def _nothing_answers(failure: Exception, url: str) -> str | None:
    """Why no try of a call to `url` can succeed soon, if `failure` says so: the connection to
    this machine was refused, or the host's name does not resolve. None: worth trying again."""
    if not isinstance(failure, httpx.ConnectError):
        return None
    host = httpx.URL(url).host
    cause: BaseException | None = failure
    while cause is not None:
        if isinstance(cause, socket.gaierror):
            return (
                f"cannot reach numerator at {url}: the name {host!r} does not resolve. Check "
                "the address: --url, NUMERATOR_URL or the client's url="
            )
        if isinstance(cause, ConnectionRefusedError) or "refused" in str(cause).lower():
            if not _loopback(host):
                return None  # another machine's service may be restarting behind a balancer
            return (
                f"cannot reach numerator at {url}: nothing listens there (connection refused). "
                "Is it running (`numerator up`)? Another address: --url, NUMERATOR_URL or the "
                "client's url="
            )
        cause = cause.__cause__ or cause.__context__
    return None


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _tls(url: str) -> bool:
    """Whether talking to `url` may take TLS: an https URL, or a proxy (from the environment,
    as httpx reads it) reached over https. Only then does the client build a verifying TLS
    context; building it loads the CA bundle, a tenth of a second of a CLI call."""
    proxies = ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy")
    return url.startswith("https:") or any(
        os.environ.get(name, "").startswith("https:") for name in proxies
    )


FAILED = (httpx.TimeoutException, httpx.TransportError)
"""No answer: the connection failed or dropped, or the try timed out."""


class Client:
    """numerator over HTTP, one connection pool; a context manager (or call `close`).

    `url` and `key` default to NUMERATOR_URL (else http://127.0.0.1:8080) and NUMERATOR_KEY;
    `timeout` limits one try, `deadline` all the tries of one call."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        timeout: float = TIMEOUT_S,
        deadline: float = DEADLINE_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url, headers = _settings(url, key)
        self.deadline, self.timeout = deadline, timeout
        self.http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            verify=_tls(self.url),
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def send(self, call: Call[T]) -> T:
        """Send `call`, trying again as `Retry` says; its answer read, or its problem raised."""
        retry = Retry(self.deadline)
        while True:
            response, failure = None, None
            try:
                response = self.http.request(**call.request(retry.left(), self.timeout))
            except FAILED as exc:
                failure = exc
                if _nothing_answers(exc, self.url):
                    retry.cut(REFUSED_DEADLINE_S)
            wait = retry.wait(response)
            if wait is None:
                return _end(call, response, failure, self.url)
            time.sleep(wait)

    def next(self, counter: str, count: int = 1, *, idempotency_key: str | None = None) -> Values:
        """`count` consecutive values of `counter`; a retry (of this call, or yours with the same
        `idempotency_key`) answers the same values."""
        return self.send(Calls.next(counter, count, idempotency_key))

    def create(self, name: str, **fields: Any) -> CounterInfo:
        """Create counter `name`: template, start, reset, timezone, retention_days, confirm.
        A counter of that name with these settings already there is returned (a retried create
        whose first answer was lost made it); one with other settings is a Conflict."""
        try:
            return self.send(Calls.create(name, fields))
        except Conflict as conflict:
            return _existing(self.send(Calls.get(name)), fields, conflict)

    def get(self, name: str) -> CounterInfo:
        return self.send(Calls.get(name))

    def counters(self, *, page: int = 100) -> list[CounterInfo]:
        """Every counter, by name (fetched `page` at a time)."""
        found: list[CounterInfo] = []
        after: str | None = None
        while True:
            counters, after = self.send(Calls.page(page, after))
            found += counters
            if after is None:
                return found

    def void(
        self,
        counter: str,
        values: Sequence[int] | None = None,
        *,
        reason: str,
        first: int | None = None,
        last: int | None = None,
        period: str | None = None,
    ) -> Marked:
        """Take values out of use for `reason` (idempotent; they are never handed out again)."""
        return self.send(Calls.void(counter, reason, values, first, last, period))

    def confirm(
        self,
        counter: str,
        values: Sequence[int] | None = None,
        *,
        first: int | None = None,
        last: int | None = None,
        period: str | None = None,
    ) -> Marked:
        """Confirm values were used (a counter created with confirm='required')."""
        return self.send(Calls.confirm(counter, values, first, last, period))

    def report(self, counter: str, period: str | None = None) -> dict[str, Any]:
        """The completeness report of a period (docs/invoices.md)."""
        return self.send(Calls.report(counter, period))


class AsyncClient:
    """`Client` for asyncio: the same calls, awaited."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        timeout: float = TIMEOUT_S,
        deadline: float = DEADLINE_S,
        transport: httpx.AsyncBaseTransport | None = None,
        limits: httpx.Limits | None = None,
    ) -> None:
        self.url, headers = _settings(url, key)
        self.deadline, self.timeout = deadline, timeout
        self.http = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            verify=_tls(self.url),
            limits=limits or httpx.Limits(max_connections=100, max_keepalive_connections=100),
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    async def send(self, call: Call[T]) -> T:
        retry = Retry(self.deadline)
        while True:
            response, failure = None, None
            try:
                response = await self.http.request(**call.request(retry.left(), self.timeout))
            except FAILED as exc:
                failure = exc
                if _nothing_answers(exc, self.url):
                    retry.cut(REFUSED_DEADLINE_S)
            wait = retry.wait(response)
            if wait is None:
                return _end(call, response, failure, self.url)
            import asyncio  # here: the CLI's calls are synchronous, and asyncio is slow to load

            await asyncio.sleep(wait)

    async def next(
        self, counter: str, count: int = 1, *, idempotency_key: str | None = None
    ) -> Values:
        return await self.send(Calls.next(counter, count, idempotency_key))

    async def create(self, name: str, **fields: Any) -> CounterInfo:
        try:
            return await self.send(Calls.create(name, fields))
        except Conflict as conflict:
            return _existing(await self.send(Calls.get(name)), fields, conflict)

    async def get(self, name: str) -> CounterInfo:
        return await self.send(Calls.get(name))

    async def counters(self, *, page: int = 100) -> list[CounterInfo]:
        found: list[CounterInfo] = []
        after: str | None = None
        while True:
            counters, after = await self.send(Calls.page(page, after))
            found += counters
            if after is None:
                return found

    async def void(
        self,
        counter: str,
        values: Sequence[int] | None = None,
        *,
        reason: str,
        first: int | None = None,
        last: int | None = None,
        period: str | None = None,
    ) -> Marked:
        return await self.send(Calls.void(counter, reason, values, first, last, period))

    async def confirm(
        self,
        counter: str,
        values: Sequence[int] | None = None,
        *,
        first: int | None = None,
        last: int | None = None,
        period: str | None = None,
    ) -> Marked:
        return await self.send(Calls.confirm(counter, values, first, last, period))

    async def report(self, counter: str, period: str | None = None) -> dict[str, Any]:
        return await self.send(Calls.report(counter, period))


def _existing(counter: CounterInfo, fields: dict[str, Any], conflict: Conflict) -> CounterInfo:
    """`counter`, if it has the settings `fields` ask for (those given); else `conflict`."""
    for name, value in fields.items():
        if value is not None and getattr(counter, name, None) != value:
            raise conflict
    return counter


def _end(call: Call[T], response: httpx.Response | None, failure: Exception | None, url: str) -> T:
    """The last try's outcome: its answer, its problem, or Unreachable."""
    if response is None:
        assert failure is not None
        why = _nothing_answers(failure, url) or f"cannot reach numerator at {url}: {failure}"
        raise Unreachable(why) from failure
    return call.answer(response)
