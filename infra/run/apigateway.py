"""API Gateway's side of a Lambda invocation, as a local runner plays it (`numerator up --edge
lambda`, the bench's atomic counter): an ASGI request's body, and the HTTP API (payload 2.0) event
API Gateway would make of it."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import Scope


async def read_body(receive: Callable[[], Awaitable[Mapping[str, Any]]]) -> bytes:
    """The whole body of an ASGI request, for the bare ASGI apps that hand a request on as an
    event (`numerator up --edge lambda`'s runner, the bench's atomic counter)."""
    body = b""
    while True:
        message = await receive()
        chunk: bytes = message.get("body", b"")
        body += chunk
        if not message.get("more_body"):
            return body


def parameters(query: str) -> dict[str, str]:
    """The query string as API Gateway gives it: a repeated name's values joined by commas."""
    out: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        out[name] = f"{out[name]},{value}" if name in out else value
    return out


def event(scope: Scope, body: bytes) -> dict[str, Any]:
    """The API Gateway HTTP API (2.0) event for an ASGI request."""
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]},{text}" if key in headers else text
    # API Gateway says how the client reached it, whatever the client sent: Mangum takes the
    # request's scheme from it (https when absent), and the Origin check compares against it.
    headers["x-forwarded-proto"] = scope.get("scheme", "http")
    query = scope["query_string"].decode("latin-1")
    path = scope["path"]
    client = scope.get("client") or ("127.0.0.1", 0)
    now = time.time()
    out: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        **({"queryStringParameters": parameters(query)} if query else {}),
        "headers": headers,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "local",
            "domainName": headers.get("host", "localhost"),
            "http": {
                "method": scope["method"],
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": client[0],
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": bool(body),
    }
    if body:
        out["body"] = base64.b64encode(body).decode()
    return out
