"""numerator's Python client: `Client` and `AsyncClient`, whose retries never take a second value.

    from numerator import Client

    with Client("http://127.0.0.1:8080") as numerator:      # or NUMERATOR_URL, NUMERATOR_KEY
        invoice = numerator.next("inv")                       # Values(first=42, formatted='INV-…')
        batch = numerator.next("inv", count=50)               # 50 consecutive values

Every `next` carries an Idempotency-Key (the caller's, or one the client makes), and every retry
of it sends the same key: after a timeout, a dropped connection, a 502, a 503 or a 429 (after its
`Retry-After`) or a 504, the service answers the retry with the values the first try took, never
new ones. Retries wait a jittered, doubling backoff, and all the tries of one call end within its
`deadline`. A problem answer (RFC 9457) is raised as a `StatusError` subclass by status, carrying
the problem's `type`, `title` and `detail`. The exceptions, all importable from `numerator` too:

    ClientError
    ├── Unreachable      no answer within the deadline
    ├── BadURL           not an http:// or https:// URL (also a ValueError)
    └── StatusError      an RFC 9457 answer
        ├── BadRequest   400, 413, 415, 422
        ├── Unauthorized 401
        ├── Forbidden    403
        ├── NotFound     404
        ├── Conflict     409
        ├── TooMany      429, after the retries
        └── ServiceUnavailable 502, 503, 504, after the retries

Each call is described once (`Call`: what to send, how to read the answer) and sent by either
client; only the sending (and the sleeping between tries) differs between the two. The parts, a
wing that imports httpx alone: `failures` (the exceptions), `results` (what the calls answer),
`calls` (`Call`, `Calls`), `retries` (`Retry`) and `clients` (`Client`, `AsyncClient`); this
module names them once, for `from numerator.client import ...`.
"""

from numerator.client.calls import Call as Call
from numerator.client.calls import Calls as Calls
from numerator.client.calls import T as T
from numerator.client.clients import DEADLINE_S, DEFAULT_URL, TIMEOUT_S, AsyncClient, Client
from numerator.client.failures import PROBLEMS as PROBLEMS
from numerator.client.failures import (
    BadRequest,
    BadURL,
    ClientError,
    Conflict,
    Forbidden,
    NotFound,
    ServiceUnavailable,
    StatusError,
    TooMany,
    Unauthorized,
    Unreachable,
)
from numerator.client.results import CounterInfo, Marked, Value, Values
from numerator.client.retries import FAILED as FAILED
from numerator.client.retries import FIRST_WAIT_S as FIRST_WAIT_S
from numerator.client.retries import LONGEST_WAIT_S as LONGEST_WAIT_S
from numerator.client.retries import REFUSED_DEADLINE_S as REFUSED_DEADLINE_S
from numerator.client.retries import RETRIED as RETRIED
from numerator.client.retries import Retry as Retry

__all__ = [
    "DEADLINE_S",
    "DEFAULT_URL",
    "TIMEOUT_S",
    "AsyncClient",
    "BadRequest",
    "BadURL",
    "Client",
    "ClientError",
    "Conflict",
    "CounterInfo",
    "Forbidden",
    "Marked",
    "NotFound",
    "ServiceUnavailable",
    "StatusError",
    "TooMany",
    "Unauthorized",
    "Unreachable",
    "Value",
    "Values",
]
