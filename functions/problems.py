"""Errors as application/problem+json (RFC 9457), each with a stable `type`.

The types are listed, with their status codes, in docs/problems.md.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from infra.wire import ReplyError

PREFIX = "urn:numerator:problem:"


class Kind(Enum):
    """Every problem numerator answers, with its status and title: the one table (docs/problems.md
    lists it, and tests/unit/test_docs.py holds the two together). Its value is the `type`'s
    last part, `urn:numerator:problem:<value>`."""

    INVALID_REQUEST = "invalid-request", 422, "The request is malformed"
    BODY_TOO_LARGE = "body-too-large", 413, "The request body is too large"
    COUNTER_NOT_FOUND = "counter-not-found", 404, "No such counter"
    NOT_FOUND = "not-found", 404, "No such resource"
    METHOD_NOT_ALLOWED = "method-not-allowed", 405, "Method not allowed"
    COUNTER_EXISTS = "counter-exists", 409, "A counter with this name exists"
    IDEMPOTENCY_KEY_REUSED = (
        "idempotency-key-reused",
        422,
        "The Idempotency-Key was used for a different request",
    )
    UNAVAILABLE = "unavailable", 503, "The service cannot take this request now"
    REPLY_TIMEOUT = "reply-timeout", 504, "No reply in time"
    BAD_REPLY = "bad-reply", 502, "The batcher's reply could not be read"
    BACKEND_REFUSED = "backend-refused", 502, "Kinesis or DynamoDB refused the edge's call"
    UNAUTHORIZED = "unauthorized", 401, "No valid API key"
    FORBIDDEN = "forbidden", 403, "The API key does not allow this"
    CROSS_SITE = "cross-site", 403, "A web page may not act for this machine's user"
    UNSUPPORTED_MEDIA_TYPE = "unsupported-media-type", 415, "The request body is not JSON"
    VALUE_NOT_ISSUED = "value-not-issued", 409, "The values have not been handed out"
    VALUE_ALREADY_VOID = "value-already-void", 409, "The values are void already"
    CONFIRM_NOT_REQUIRED = "confirm-not-required", 409, "The counter does not take confirmations"
    REWOUND = "rewound", 503, "The counter is behind values already handed out"
    KEY_EXISTS = "key-exists", 409, "An API key with this name exists"
    KEY_NOT_FOUND = "key-not-found", 404, "No such API key"
    TOO_MANY_IDEMPOTENCY_KEYS = (
        "too-many-idempotency-keys",
        429,
        "Too many Idempotency-Keys from this client",
    )
    HEADERS_TOO_LARGE = "headers-too-large", 431, "The request headers are too large"
    REPEATED_HEADER = "repeated-header", 400, "A header that may come once came again"
    BAD_HOST = "bad-host", 400, "The Host header cannot be read"
    BODY_TIMEOUT = "body-timeout", 408, "The request body did not arrive in time"
    INTERNAL = "internal", 500, "Internal error"

    def __new__(cls, name: str, status: int, title: str) -> Kind:
        kind = object.__new__(cls)
        kind._value_ = name
        kind.status, kind.title = status, title
        return kind

    status: int
    title: str

    @property
    def type(self) -> str:
        return PREFIX + str(self.value)


class Problem(Exception):
    """A problem answer: its kind (status and title from the table), what went wrong, and any
    members beside (`field`); `status` only where the HTTP layer chose it (Starlette's own)."""

    def __init__(
        self, kind: Kind, detail: str = "", status: int | None = None, **extra: Any
    ) -> None:
        super().__init__(detail)
        self.kind, self.detail, self.extra = kind, detail, extra
        self.status = status or kind.status
        self.headers: dict[str, str] = {}

    def body(self, instance: str = "") -> bytes:
        body: dict[str, Any] = {
            "type": self.kind.type,
            "title": self.kind.title,
            "status": self.status,
        }
        if self.detail:
            body["detail"] = self.detail
        if instance:
            body["instance"] = instance
        body.update(self.extra)
        return orjson.dumps(body)

    def response(self, instance: str = "") -> Response:
        return Response(
            self.body(instance),
            status_code=self.status,
            headers=self.headers,
            media_type="application/problem+json",
        )


REPLY_PROBLEMS: dict[ReplyError, Kind] = {
    ReplyError.COUNTER_NOT_FOUND: Kind.COUNTER_NOT_FOUND,
    ReplyError.IDEMPOTENCY_KEY_REUSED: Kind.IDEMPOTENCY_KEY_REUSED,
    ReplyError.BAD_RECORD: Kind.INVALID_REQUEST,
    ReplyError.EXPIRED: Kind.UNAVAILABLE,
    ReplyError.UNAVAILABLE: Kind.UNAVAILABLE,
    ReplyError.NOT_ISSUED: Kind.VALUE_NOT_ISSUED,
    ReplyError.ALREADY_VOID: Kind.VALUE_ALREADY_VOID,
    ReplyError.NOT_CONFIRMABLE: Kind.CONFIRM_NOT_REQUIRED,
    ReplyError.REWOUND: Kind.REWOUND,
}
"""Each reply error's problem: the one table the edge answers from."""


def bad_reply(detail: str) -> Problem:
    return Problem(Kind.BAD_REPLY, detail)


def unavailable(detail: str, retry_after: int) -> Problem:
    problem = Problem(Kind.UNAVAILABLE, detail)
    problem.headers["Retry-After"] = str(retry_after)
    return problem


def invalid(field: str, detail: str) -> Problem:
    return Problem(Kind.INVALID_REQUEST, detail, field=field)


async def handle_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return exc.response(request.url.path)
