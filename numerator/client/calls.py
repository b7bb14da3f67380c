"""Each call described once (`Call`: what to send, how to read the answer), for either client
to send; `Calls` makes every call the clients make."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from numerator.client.failures import problem
from numerator.client.results import CounterInfo, Marked, Values

T = TypeVar("T")


def as_sent(body: Any) -> Any:
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
            raise problem(response)
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
        return Call("GET", f"/counters/{counter}/report", as_sent, params=params)
