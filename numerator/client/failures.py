"""The client's exceptions, one family apart from the service's (infra.errors): `ClientError`,
and `StatusError` by status for an RFC 9457 problem answer (`problem`)."""

from __future__ import annotations

from typing import Any

import httpx


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


def problem(response: httpx.Response) -> StatusError:
    """The exception for a 4xx or 5xx answer."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"title": response.reason_phrase, "detail": response.text[:200]}
    return PROBLEMS.get(response.status_code, StatusError)(response.status_code, body)
