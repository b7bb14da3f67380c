"""When a call is tried again, and how long it waits first (`Retry`); and whether a failed try
says that nothing can answer soon (`nothing_answers`), which cuts the tries short."""

from __future__ import annotations

import email.utils
import ipaddress
import random
import socket
import time
from collections.abc import Callable
from datetime import UTC

import httpx

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


FAILED = (httpx.TimeoutException, httpx.TransportError)
"""No answer: the connection failed or dropped, or the try timed out."""


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


def nothing_answers(failure: Exception, url: str) -> str | None:
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
