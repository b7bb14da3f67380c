"""Reading and checking what a client sent: body, names, counts, paging, idempotency keys; a body
or a query against its model (functions/bodies.py)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, TypeVar

import msgspec
import orjson
from starlette.requests import Request

from functions import bodies
from functions.problems import Kind, Problem, invalid
from infra.counters import check_name
from infra.errors import InvalidCounter
from infra.settings import Settings

IDEMPOTENCY_KEY = re.compile(bodies.IDEMPOTENCY_KEY)
_COUNT = msgspec.inspect.type_info(bodies.NextQuery).fields[0].type  # type: ignore[attr-defined]
MIN_COUNT, MAX_COUNT = _COUNT.ge, _COUNT.le
_LIMIT = msgspec.inspect.type_info(bodies.PageQuery).fields[0].type  # type: ignore[attr-defined]
MAX_PAGE = _LIMIT.le

T = TypeVar("T")
_AT = re.compile(r" - at `\$\.?([^`\[]*)[^`]*`$")
_NAMED = re.compile(r"(unknown|missing required) field `([^`]*)`")


def checked(model: type[T], data: Any, *, text: bool = False) -> T:
    """`data`, a decoded JSON body (or with `text`, a query's parameters, read from text), as
    `model`; else a 422 naming the field it is about and what is wrong with it."""
    try:
        if text:
            return msgspec.convert(data, model, strict=False)
        return msgspec.convert(_integral(data), model)
    except msgspec.ValidationError as exc:
        raise invalid(*_field_and_problem(str(exc))) from None


def _integral(data: Any) -> Any:
    """`data` with each float that is a whole number as an int: 5.0 is an integer to JSON
    Schema, which the schema's readers (and generated clients) follow."""
    if isinstance(data, float) and data.is_integer():
        return int(data)
    if isinstance(data, list):
        return [_integral(item) for item in data]
    if isinstance(data, dict):
        return {name: _integral(item) for name, item in data.items()}
    return data


def _field_and_problem(message: str) -> tuple[str, str]:
    named = _NAMED.search(message)
    if named is not None:
        return named.group(2)[:80], "unknown field" if named.group(1) == "unknown" else "required"
    at = _AT.search(message)
    if at is None:
        return "body", message
    return at.group(1) or "body", message[: at.start()]


async def json_body(request: Request, settings: Settings) -> Any:
    """The request's JSON body: sent as application/json (415: a form or text/plain body is
    what a web page can send across sites without asking), at most MAX_BODY_BYTES (413), in
    BODY_TIMEOUT_S (408), each object's keys once (422: which one wins is no one's guess)."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise Problem(
            Kind.UNSUPPORTED_MEDIA_TYPE,
            f"the body must be sent as Content-Type: application/json, not {media[:80]!r}"
            if media
            else "the body must be sent as Content-Type: application/json (none was given)",
        )
    try:
        async with asyncio.timeout(settings.edge.body_timeout_s):
            return await _json_body(request, settings.edge.max_body_bytes)
    except TimeoutError:
        raise Problem(
            Kind.BODY_TIMEOUT,
            f"the body did not arrive within {settings.edge.body_timeout_s:g} s",
        ) from None


async def _json_body(request: Request, limit: int) -> Any:
    length = request.headers.get("content-length")
    if length is not None:
        if not (length.isascii() and length.isdigit()):
            raise invalid("Content-Length", "must be a number of bytes")
        if int(length) > limit:
            raise Problem(Kind.BODY_TOO_LARGE, f"the body may be at most {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Problem(Kind.BODY_TOO_LARGE, f"the body may be at most {limit} bytes")
    if not body:
        raise invalid("body", "a JSON object is required")
    try:
        orjson.loads(body)  # strict JSON (no NaN, valid UTF-8), and its error messages
    except orjson.JSONDecodeError as exc:
        raise invalid("body", f"not valid JSON: {exc}") from None
    return json.loads(body, object_pairs_hook=once)


def once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys each appear once; a repeated one is a 422."""
    made = dict(pairs)
    if len(made) != len(pairs):
        key = repeated(pairs)
        raise invalid(key[:80], f"{key[:80]!r} is given more than once in the body")
    return made


def repeated(pairs: list[tuple[str, Any]]) -> str:
    """The first name that `pairs` (which has one) gives a second time."""
    seen: set[str] = set()
    for name, _ in pairs:
        if name in seen:
            return name
        seen.add(name)
    raise ValueError("no name is repeated")


def name(value: str, field: str = "name") -> str:
    """A counter's name from the path (or the query's `field`); a 422 naming the field and the
    value it refuses."""
    try:
        check_name(value)
    except InvalidCounter as exc:
        raise invalid(field, f"{value[:80]!r} {exc.problem}") from None
    return value


def integer(raw: str | None, field: str, default: int, low: int, high: int) -> int:
    """A query parameter's value (None when absent) as an integer in [low, high]."""
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
        raise invalid(field, f"must be an integer from {low} to {high}")
    value = int(raw)
    if not low <= value <= high:
        raise invalid(field, f"must be an integer from {low} to {high}")
    return value


def count(raw: str | None) -> int:
    """/next's `count`, read by hand within the bounds of its model (bodies.NextQuery): on the
    hot path, by hand costs less than msgspec (bench/bodies.py)."""
    return integer(raw, "count", 1, MIN_COUNT, MAX_COUNT)


def idempotency_key(key: str | None) -> str | None:
    if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
        raise invalid("Idempotency-Key", "must be 1 to 200 printable ASCII characters, no spaces")
    return key
