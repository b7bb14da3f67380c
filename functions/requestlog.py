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
LINES_PER_S = 10
"""Lines a process writes a second at most: through an outage every request fails, and a line
each (thousands a second) would cost what the quiet lines saved, and stall a worker whose log
pipe fills. The rest are counted, and said in one line when the next second's first is."""


class LineBudget:
    """At most `per_s` lines a second; how many were held back in the last second that had any."""

    def __init__(self, per_s: int = LINES_PER_S) -> None:
        self.per_s = per_s
        self.since, self.said, self.held = 0.0, 0, 0

    def take(self, now: float) -> tuple[bool, int]:
        """Whether a line may be written now, and how many were held back before it (to say)."""
        held = 0
        if now - self.since >= 1.0:
            held, self.since, self.said, self.held = self.held, now, 0, 0
        if self.said < self.per_s:
            self.said += 1
            return True, held
        self.held += 1
        return False, held


budget = LineBudget()


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
        judged(scope, status, time.perf_counter() - began)


def judged(scope: Scope, status: int, spent: float) -> None:
    """Log a request answered `status` (0: nothing) after `spent` seconds if it failed on the
    server's side or was slow (within the line budget)."""
    if status >= 500 or status == 0 or spent >= SLOW_S:
        may, held = budget.take(time.monotonic())
        if held:
            log.error("%d more failed or slow answers were not logged (%d a second at most)",
                      held, budget.per_s)  # fmt: skip
        if may:
            say = log.error if status >= 500 or status == 0 else log.warning
            say(
                "%s %s answered %s in %.0f ms (request id %s)",
                scope["method"],
                scope["path"],
                status or "nothing",
                spent * 1000,
                request_id(scope),
            )
