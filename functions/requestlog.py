"""A request's log line: none for one that works, one for a server error or a slow answer.

CloudWatch Logs charges every byte taken in: a line a request at 10,000 rps is terabytes a month,
more than the rest of the server edge's bill. What a request that works tells is in the metrics
(counted, and written as one EMF line an interval: infra/observe/emf.py); what an operator needs
a line for is the request that failed or was slow, with the id to find it by: the Lambda
invocation's request id, or the load balancer's trace id (`X-Amzn-Trace-Id`), else one made here.
"""

from __future__ import annotations

import logging
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("numerator.edge")

SLOW_S = 1.0
"""An answer slower than this is logged: four times the /next SLO's 250 ms (docs/operations.md)."""


def request_id(scope: Scope) -> str:
    """The id the request is found by in AWS's own records."""
    context = scope.get("aws.context")
    found = getattr(context, "aws_request_id", None)
    if isinstance(found, str):
        return found
    for name, value in scope.get("headers") or []:
        if name == b"x-amzn-trace-id":
            return str(value.decode("latin-1"))
    return uuid.uuid4().hex


async def logged(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Serve the request with `app`, and log it if it failed on the server's side or was slow."""
    began = time.perf_counter()
    status = 0

    async def sending(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    try:
        await app(scope, receive, sending)
    finally:
        spent = time.perf_counter() - began
        if status >= 500 or status == 0 or spent >= SLOW_S:
            say = log.error if status >= 500 or status == 0 else log.warning
            say(
                "%s %s answered %s in %.0f ms (request id %s)",
                scope["method"],
                scope["path"],
                status or "nothing",
                spent * 1000,
                request_id(scope),
            )
