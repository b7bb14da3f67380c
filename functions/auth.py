"""Who may do what at the edge: Bearer API keys checked against an in-memory copy of the keys.

- The copy is reloaded from Postgres when it is older than KEYS_REFRESH_S, by the first request
  that finds it so (the others go on with the copy they have), never once per request; and at
  once when a key is created or revoked anywhere: long-running edges follow Postgres's
  NOTIFY (`Guard.follow`), and a key the copy does not know is looked up (`verify`), so a new key
  works at once on every worker and every Lambda container. A revoked key stops at once on
  long-running edges, and within KEYS_REFRESH_S on Lambda containers (which cannot listen
  while frozen between invocations). The same reload writes back when each key was last used.
- With no key ever created, the edge serves loopback clients only (Redis's protected mode) and
  answers everyone else 401, saying how to create the first key. A loopback client is trusted
  only when it is not a web page acting for the local user (`foreign`): its `Host` must be a
  loopback name or address (a DNS-rebinding page's is its own name) and its `Origin`, if any,
  the service's own (a cross-site form's is the page's). AUTH=none without an authorizer in
  front trusts loopback clients the same way, with the same check.
- No response or log line holds a secret; a key is named by its id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from starlette.types import Scope

from functions.headers import Headers, local
from functions.limits import KeyRate
from functions.operations import Needed
from functions.problems import Kind, Problem
from infra.backoff import Backoff
from infra.errors import StoreError, Unavailable
from infra.keys import Key, Need, identify
from infra.observe.metrics import Metrics
from infra.ports import Keys
from infra.settings import loopback

log = logging.getLogger("numerator.auth")

RETRY_S = 1.0  # after a failed reload, the next try waits this long
STALE_WAIT_S = 0.2  # with a copy in hand, a request waits this long for a reload, then uses it
MISS_LOOKUPS_PER_S = 20.0  # unknown keys looked up in Postgres, at most, per edge process
CACHED = 10_000  # verified headers and scope answers remembered, at most (then forgotten)
CHALLENGE = 'Bearer realm="numerator"'
FIRST_KEY = (
    "no API key exists yet, so this numerator serves clients on its own machine only. "
    "Create the first key there: `numerator keys create NAME --scope admin`"
)
KEY_NEEDED = (
    "API keys exist, so every client needs one, on this machine too: send Authorization: "
    "Bearer nmr_… (the numerator command: --key or NUMERATOR_KEY; the Python client: key= or "
    "NUMERATOR_KEY)"
)


def address(scope: Scope) -> str:
    """The client's address, as the server (or API Gateway, through Mangum) gives it."""
    client = scope.get("client")
    return str(client[0]) if client else ""


def foreign(scope: Scope) -> str | None:
    """Why a request from this machine may be a web page's acting for the local user, not the
    user's own (None: it is not): a `Host` that is not one loopback name or address (parsed as
    a browser writes it: no user part, a numeric port, any case), an `Origin` other than the
    service's own (scheme included) or, without one, a `Referer` from another origin, or a
    browser's `Sec-Fetch-Site` saying another site sent it. A request whose headers are
    `plain` (functions/headers.py) has none of these, so the edge does not ask about it."""
    hosts: list[bytes] = []
    origin, referer, site = None, None, None
    for header, value in scope["headers"]:
        if header == b"host":
            hosts.append(value)
        elif header == b"origin":
            origin = value.decode("latin-1")
        elif header == b"referer":
            referer = value.decode("latin-1")
        elif header == b"sec-fetch-site":
            site = value.decode("latin-1").lower()
    if len(hosts) > 1:
        return f"it has {len(hosts)} Host headers"
    host = hosts[0].decode("latin-1") if hosts else None
    if host is not None and not local(hosts[0]):
        return f"its Host, {host[:100]!r}, is not a loopback name or address"
    if origin is not None or referer is not None:  # a program's request sends neither
        own = own_origin(scope.get("scheme", "http"), host)
        if origin is not None and origin.lower() != own:
            return f"its Origin, {origin[:100]!r}, is not this service's own"
        if origin is None and referer is not None and not same_origin(referer, own):
            return f"its Referer, {referer[:100]!r}, is another site's page"
    if site in ("cross-site", "same-site"):
        return f"the browser says another site sent it (Sec-Fetch-Site: {site})"
    return None


def own_origin(scheme: str, host: str | None) -> str | None:
    """The Origin a page of this service sends (None: no Host to make it from)."""
    return None if host is None else f"{scheme}://{host.strip().lower()}"


def same_origin(url: str, own: str | None) -> bool:
    """Whether a Referer's page is the service's own."""
    if own is None:
        return False
    url = url.lower()
    return url == own or url.startswith(own + "/")


def pages_refused(scope: Scope) -> Problem | None:
    """The 403 for a request from this machine that looks like a web page's (`foreign`), where
    loopback clients are trusted without a key; None for the user's own."""
    reason = foreign(scope)
    return None if reason is None else cross_site(reason)


def cross_site(reason: str) -> Problem:
    return Problem(
        Kind.CROSS_SITE,
        f"this numerator trusts clients on its own machine without a key, but not web pages "
        f"acting for them, and this request looks like one: {reason}. Send an API key "
        "(Authorization: Bearer nmr_…), or call it as http://127.0.0.1:PORT (or localhost) "
        "from a program, not a browser page",
    )


def unauthorized(detail: str, invalid: bool = True) -> Problem:
    problem = Problem(Kind.UNAUTHORIZED, detail)
    challenge = CHALLENGE + (', error="invalid_token"' if invalid else "")
    problem.headers["WWW-Authenticate"] = challenge
    return problem


class Guard:
    def __init__(
        self,
        store: Keys,
        every: float,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.every, self.metrics = store, every, metrics
        self.clock = clock
        self.live: dict[str, Key] = {}  # unrevoked keys by id
        self.any = False  # whether any key was ever created (revoked ones count)
        self.ready = False  # whether a copy was ever loaded
        self.due = 0.0  # when (self.clock) the copy is to be reloaded, or a failed reload retried
        self.misses = KeyRate(MISS_LOOKUPS_PER_S, clock)  # lookups of keys not in the copy
        self.used: dict[str, float] = {}  # key id -> last use (epoch seconds), not written back
        self.verified: dict[bytes, Key] = {}  # Authorization header -> its live key
        self.allowed: dict[tuple[str, str], bool] = {}  # (key id, counter) -> may take values
        self.reload: asyncio.Future[None] | None = None
        self.holding = False  # whether a request that finds a reload running waits for it
        self.waiting: list[asyncio.Future[None]] = []  # the requests that do
        self.stale: asyncio.TimerHandle | None = None  # when they stop waiting with a copy

    async def admit(self, scope: Scope, needed: Needed, heads: Headers) -> str:
        """Who sent this request — `key:ID`, or the client's address when no key is needed —
        if it may go on; else raise the 401, 403 or 503 Problem. `needed`: what its route needs
        (functions/operations.py `Table.need`); `heads`: its headers (functions/headers.py)."""
        sender = address(scope)
        if needed is None:
            return sender
        if not self.ready or self.clock() >= self.due:
            await self.fresh()
        header = heads.authorization
        if header is None:
            if not self.any:
                if loopback(sender):
                    refused = None if heads.plain else pages_refused(scope)
                    if refused is not None:
                        raise self.refuse(refused)
                    return sender
                raise self.refuse(unauthorized(FIRST_KEY, invalid=False))
            raise self.refuse(unauthorized(KEY_NEEDED, invalid=False))
        key = self.verified.get(header) or await self.verify(header)
        kind, counter = needed
        if kind is Need.NEXT:
            allowed = self.allowed.get((key.id, counter))
            if allowed is None:
                allowed = key.allows(kind, counter)
                if len(self.allowed) >= CACHED:
                    self.allowed.clear()
                self.allowed[key.id, counter] = allowed
        else:
            allowed = key.allows(kind, counter)
        if not allowed:
            what = f"take values of counter {counter!r}" if kind is Need.NEXT else kind.value
            raise self.refuse(Problem(Kind.FORBIDDEN, f"key {key.id} ({key.name}) may not {what}"))
        self.used[key.id] = time.time()
        return "key:" + key.id

    async def verify(self, header: bytes) -> Key:
        """The live key an Authorization header carries (remembered until the next reload,
        so that a key is hashed once per reload, not once per request), or a 401 Problem. A
        key this copy does not know may be newer than it: it is looked up in Postgres (at most
        MISS_LOOKUPS_PER_S times a second, so that made-up keys cannot turn every request into
        a query), and a key made a moment ago works at once on every edge."""
        scheme, _, secret = header.decode("latin-1").partition(" ")
        secret = secret.strip()
        key_id = identify(secret) if scheme.lower() == "bearer" else None
        key = self.live.get(key_id) if key_id else None
        if key is None and key_id is not None and not self.misses.take(""):
            key = await self.lookup(key_id)
        if key is None or not key.matches(secret):
            raise self.refuse(unauthorized("the API key is unknown or revoked"))
        if len(self.verified) >= CACHED:
            self.verified.clear()
        self.verified[header] = key
        return key

    async def lookup(self, key_id: str) -> Key | None:
        """A key this copy does not know, read from Postgres: it may be newer than the copy."""
        try:
            key = await self.store.key(key_id)
        except (Unavailable, StoreError) as exc:
            log.warning("cannot look an API key up: %s", exc)
            return None
        if key is None or key.revoked is not None:
            return None
        self.live[key.id] = key
        return key

    async def follow(self) -> None:
        """Reload the copy whenever a key is created or revoked anywhere (the store's
        key_changes: Postgres LISTEN/NOTIFY), until cancelled: a revoked key stops at once
        on every long-running edge, not within KEYS_REFRESH_S. When it cannot listen, it says
        so and tries again with backoff; the reloads every KEYS_REFRESH_S go on meanwhile."""
        backoff = Backoff(base=0.5, cap=30.0)
        while True:
            try:
                async for _ in self.store.key_changes():
                    self.changed()
                    backoff.reset()
            except Unavailable as exc:
                log.warning("cannot follow key changes (reloading every %gs): %s", self.every, exc)
            await asyncio.sleep(backoff.next())

    def changed(self) -> None:
        """Keys were created or revoked: reload before the next check."""
        self.due = 0.0

    def refuse(self, problem: Problem) -> Problem:
        self.metrics.requests_refused.inc(str(problem.status))
        return problem

    async def fresh(self) -> None:
        """Reload the copy of the keys when it is due: the first request to find it due starts
        one reload, and the requests that come while it runs wait for it — for STALE_WAIT_S at
        most when a copy is in hand (a healthy Postgres answers in milliseconds, so a revoked key
        still stops at once; a slow or unreachable one must not hold /metrics and every request
        for the pool's timeout: from then on they go on with the copy). Without any copy, they
        wait, then a 503. They wait on one future each, released together (`_release`): a
        timeout and a shield each were a few per cent of /next at 1,024 connections, where every
        request comes during each reload."""
        if self.reload is None and self.clock() >= self.due:
            self._start()
        if self.reload is not None and self.holding:
            waiter = asyncio.get_running_loop().create_future()
            self.waiting.append(waiter)
            await waiter
        if not self.ready:
            raise Problem(Kind.UNAVAILABLE, "cannot read the API keys from Postgres")

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self.reload = loop.create_task(self._reload())
        self.reload.add_done_callback(self._release)
        self.holding = True
        if self.ready:
            self.stale = loop.call_later(STALE_WAIT_S, self._release)

    def _release(self, *_: object) -> None:
        """The reload ended, or has run STALE_WAIT_S with a copy in hand: the requests waiting
        for it go on, and so do those that come before it ends."""
        self.holding = False
        if self.stale is not None:
            self.stale.cancel()
            self.stale = None
        waiting, self.waiting = self.waiting, []
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(None)

    async def _reload(self) -> None:
        used, self.used = self.used, {}
        try:
            await self.store.touch_keys(
                {key: datetime.fromtimestamp(at, UTC) for key, at in used.items()}
            )
            keys = await self.store.keys()
        except (Unavailable, StoreError) as exc:
            self.used = {**used, **self.used}
            self.metrics.keys_refresh_errors.inc()
            self.due = self.clock() + RETRY_S
            if self.ready:  # keep the copy we have
                log.warning("cannot reload the API keys (keeping the last copy): %s", exc)
            return
        finally:
            self.reload = None
        self.live = {key.id: key for key in keys if key.revoked is None}
        self.verified, self.allowed = {}, {}  # a revoked key must be checked again
        self.any = bool(keys)
        self.ready, self.due = True, self.clock() + self.every
