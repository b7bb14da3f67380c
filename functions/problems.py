"""Errors as application/problem+json (RFC 9457), each with a stable `type`.

The types are listed, with their status codes, in docs/problems.md.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from infra.wire import ReplyError

PREFIX = "urn:numerator:problem:"

TITLES = {
    "not-found": "No such resource",
    "counter-not-found": "No such counter",
    "counter-exists": "A counter with this name exists",
    "method-not-allowed": "Method not allowed",
    "invalid-request": "The request is malformed",
    "idempotency-key-reused": "The Idempotency-Key was used for a different request",
    "body-too-large": "The request body is too large",
    "unavailable": "The service cannot take this request now",
    "reply-timeout": "No reply in time",
    "bad-reply": "The batcher's reply could not be read",
    "internal": "Internal error",
    "unauthorized": "No valid API key",
    "forbidden": "The API key does not allow this",
    "cross-site": "A web page may not act for this machine's user",
    "key-exists": "An API key with this name exists",
    "key-not-found": "No such API key",
    "too-many-idempotency-keys": "Too many Idempotency-Keys from this client",
    "headers-too-large": "The request headers are too large",
    "body-timeout": "The request body did not arrive in time",
    "unsupported-media-type": "The request body is not JSON",
    "value-not-issued": "The values have not been handed out",
    "value-already-void": "The values are void already",
    "confirm-not-required": "The counter does not take confirmations",
}


class Problem(Exception):
    def __init__(self, status: int, kind: str, detail: str = "", **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.kind, self.detail, self.extra = status, kind, detail, extra
        self.headers: dict[str, str] = {}

    def response(self, instance: str = "") -> Response:
        body: dict[str, Any] = {
            "type": PREFIX + self.kind,
            "title": TITLES.get(self.kind, self.kind),
            "status": self.status,
        }
        if self.detail:
            body["detail"] = self.detail
        if instance:
            body["instance"] = instance
        body.update(self.extra)
        return Response(
            orjson.dumps(body),
            status_code=self.status,
            headers=self.headers,
            media_type="application/problem+json",
        )


REPLY_PROBLEMS: dict[ReplyError, tuple[int, str]] = {
    ReplyError.COUNTER_NOT_FOUND: (404, "counter-not-found"),
    ReplyError.IDEMPOTENCY_KEY_REUSED: (422, "idempotency-key-reused"),
    ReplyError.BAD_RECORD: (422, "invalid-request"),
    ReplyError.EXPIRED: (503, "unavailable"),
    ReplyError.UNAVAILABLE: (503, "unavailable"),
    ReplyError.NOT_ISSUED: (409, "value-not-issued"),
    ReplyError.ALREADY_VOID: (409, "value-already-void"),
    ReplyError.NOT_CONFIRMABLE: (409, "confirm-not-required"),
}
"""Each reply error's HTTP status and problem type: the one table the edge answers from."""


def bad_reply(detail: str) -> Problem:
    return Problem(502, "bad-reply", detail)


def unavailable(detail: str, retry_after: int) -> Problem:
    problem = Problem(503, "unavailable", detail)
    problem.headers["Retry-After"] = str(retry_after)
    return problem


def invalid(field: str, detail: str) -> Problem:
    return Problem(422, "invalid-request", detail, field=field)


async def handle_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return exc.response(request.url.path)
