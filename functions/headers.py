"""The request headers the edge reads before any route, in one pass over them.

Every request's headers are sized (MAX_HEADER_BYTES), and before the first key a loopback
client's are checked for the marks of a web page acting for the local user (functions/auth.py:
`foreign`). A program's request carries one loopback `Host` and none of a browser's headers, so
the pass notes what would make the full check worth running (`plain`), and the full check runs
only when it is not: every request paid for three passes and the check (issue 33).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from starlette.types import Scope

from infra.settings import loopback

# What a browser adds to a page's request (Origin, Referer, Fetch Metadata): a request with
# any of them gets the full check.
BROWSER = frozenset({b"origin", b"referer", b"sec-fetch-site"})


class Headers(NamedTuple):
    size: int
    """Bytes of the names and values of every header."""
    authorization: bytes | None
    idempotency_key: bytes | None
    length: int
    """Content-Length (0 when absent or not a number)."""
    plain: bool
    """At most one Host, a loopback one, and no browser's header: no page's request (`foreign`
    would find nothing)."""
    repeated: bytes | None
    """The name of a header that must come once and came again (Authorization,
    Idempotency-Key): which one the sender meant is no one's guess (400)."""
    chunked: bool
    """A Transfer-Encoding was sent: a body of a length not said beforehand."""


def read(scope: Scope) -> Headers:
    """The headers of `scope`, read once."""
    size = length = hosts = 0
    authorization = key = host = repeated = None
    browser = chunked = False
    for header, value in scope["headers"]:
        size += len(header) + len(value)
        if header == b"host":
            host = value
            hosts += 1
        elif header == b"authorization":
            repeated = header if authorization is not None else repeated
            authorization = value
        elif header == b"idempotency-key":
            repeated = header if key is not None else repeated
            key = value
        elif header == b"content-length":
            if value.isdigit():
                length = int(value)
        elif header == b"transfer-encoding":
            chunked = True
        elif header in BROWSER:
            browser = True
    plain = not browser and (host is None or (hosts == 1 and local(host)))
    return Headers(size, authorization, key, length, plain, repeated, chunked)


@functools.lru_cache(maxsize=256)
def local(host: bytes) -> bool:
    """Whether a Host header names this machine: a loopback name or address."""
    return loopback(hostname(host.decode("latin-1")))


def hostname(host: str) -> str:
    """The name or address in a Host header, without its port, lower-case: `[::1]:8190` ->
    `::1`, `LOCALHOST` -> `localhost`; '' for a header no browser writes (a user part, a port
    that is not a number, a bare IPv6 address), which no loopback check passes."""
    host = host.strip().lower()
    bracketed = host.startswith("[")
    if bracketed:
        end = host.find("]")
        name, rest = (host[1:end], host[end + 1 :]) if end > 0 else ("", "")
    else:
        name, colon, port = host.partition(":")
        rest = colon + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return ""
    if not name or any(c in name for c in "@/\\?#%[] " + ("" if bracketed else ":")):
        return ""
    return name
