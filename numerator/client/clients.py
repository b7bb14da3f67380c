"""`Client` and `AsyncClient`: where the service is (its URL and API key) and one connection
pool each; they send the same `Call`s, trying again as `Retry` says, and differ only in the
sending and the sleeping between tries."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import httpx

from numerator.client.calls import Call, Calls, T
from numerator.client.failures import BadURL, Conflict, Unreachable
from numerator.client.results import CounterInfo, Marked, Values
from numerator.client.retries import FAILED, REFUSED_DEADLINE_S, Retry, nothing_answers

DEFAULT_URL = "http://127.0.0.1:8080"
TIMEOUT_S = 30.0
"""One try's limit: longer than the service's REPLY_TIMEOUT_S (25 s), so that a value that takes
long comes back as the service's 504 rather than as the client giving up."""
DEADLINE_S = 60.0
"""All the tries of one call end within this."""


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


def _tls(url: str) -> bool:
    """Whether talking to `url` may take TLS: an https URL, or a proxy (from the environment,
    as httpx reads it) reached over https. Only then does the client build a verifying TLS
    context; building it loads the CA bundle, a tenth of a second of a CLI call."""
    proxies = ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy")
    return url.startswith("https:") or any(
        os.environ.get(name, "").startswith("https:") for name in proxies
    )


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
                if nothing_answers(exc, self.url):
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
                if nothing_answers(exc, self.url):
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
        why = nothing_answers(failure, url) or f"cannot reach numerator at {url}: {failure}"
        raise Unreachable(why) from failure
    return call.answer(response)
