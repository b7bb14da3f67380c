"""Who may do what at the edge: Bearer API keys checked against an in-memory copy of the keys.

- The copy is reloaded from Postgres when it is older than KEYS_REFRESH_S, by the first request
  that finds it so (the others go on with the copy they have), never once per request. A
  revoked key stops working within KEYS_REFRESH_S plus one query. The same reload writes back
  when each key was last used.
- With no key ever created, the edge serves loopback clients only (Redis's protected mode) and
  answers everyone else 401, saying how to create the first key.
- No response or log line holds a secret; a key is named by its id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from starlette.types import Scope

from functions.problems import Problem
from infra.errors import StoreError, Unavailable
from infra.keys import Key, Need, identify
from infra.metrics import Metrics
from infra.ports import Store
from infra.settings import loopback

log = logging.getLogger("numerator.auth")

OPEN = frozenset({"/healthz", "/ping", "/openapi.json"})  # health checks, the yardstick, the schema
RETRY_S = 1.0  # after a failed reload, the next try waits this long
CACHED = 10_000  # verified headers and scope answers remembered, at most (then forgotten)
ADMIN, READ, ANY = (Need.ADMIN, ""), (Need.READ, ""), (Need.ANY, "")
CHALLENGE = 'Bearer realm="numerator"'
FIRST_KEY = (
    "no API key exists yet, so this numerator serves clients on its own machine only. "
    "Create the first key there: `numerator keys create NAME --scope admin`"
)


def next_counter(method: str, path: str) -> str | None:
    """The counter a request to the hot route, POST /counters/{name}/next, takes values of;
    None for any other request."""
    if (
        method == "POST"
        and path.startswith("/counters/")
        and path.endswith("/next")
        and path.count("/") == 3
    ):
        return path[10:-5]
    return None


def need(method: str, path: str, counter: str | None) -> tuple[Need, str] | None:
    """What a request needs a key to allow, and the counter it takes values of (`counter`:
    next_counter's answer for it); None: open."""
    if counter is not None:
        return Need.NEXT, counter
    if path in OPEN:
        return None
    if path == "/keys" or path.startswith("/keys/") or (method == "POST" and path == "/counters"):
        return ADMIN
    if method in ("GET", "HEAD"):
        return READ
    return ANY


def address(scope: Scope) -> str:
    """The client's address, as the server (or API Gateway, through Mangum) gives it."""
    client = scope.get("client")
    return str(client[0]) if client else ""


def unauthorized(detail: str, invalid: bool = True) -> Problem:
    problem = Problem(401, "unauthorized", detail)
    challenge = CHALLENGE + (', error="invalid_token"' if invalid else "")
    problem.headers["WWW-Authenticate"] = challenge
    return problem


def bearer(scope: Scope) -> str | None:
    for header, value in scope["headers"]:
        if header == b"authorization":
            text: str = value.decode("latin-1")
            return text
    return None


class Guard:
    def __init__(
        self,
        store: Store,
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
        self.used: dict[str, float] = {}  # key id -> last use (epoch seconds), not written back
        self.verified: dict[str, Key] = {}  # Authorization header -> its live key
        self.allowed: dict[tuple[str, str], bool] = {}  # (key id, counter) -> may take values
        self.reload: asyncio.Future[None] | None = None

    async def admit(self, scope: Scope, counter: str | None) -> str:
        """Who sent this request — `key:ID`, or the client's address when no key is needed —
        if it may go on; else raise the 401, 403 or 503 Problem. `counter`: next_counter's."""
        sender = address(scope)
        needed = need(scope["method"], scope["path"], counter)
        if needed is None:
            return sender
        if not self.ready or self.clock() >= self.due:
            await self.fresh()
        header = bearer(scope)
        if header is None:
            if not self.any:
                if loopback(sender):
                    return sender
                raise self.refuse(unauthorized(FIRST_KEY, invalid=False))
            raise self.refuse(
                unauthorized("this route needs an API key: Authorization: Bearer nmr_…", False)
            )
        key = self.verified.get(header) or self.verify(header)
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
            raise self.refuse(
                Problem(403, "forbidden", f"key {key.id} ({key.name}) may not {what}")
            )
        self.used[key.id] = time.time()
        return "key:" + key.id

    def verify(self, header: str) -> Key:
        """The live key an Authorization header carries (remembered until the next reload,
        so that a key is hashed once per reload, not once per request), or a 401 Problem."""
        scheme, _, secret = header.partition(" ")
        secret = secret.strip()
        key_id = identify(secret) if scheme.lower() == "bearer" else None
        key = self.live.get(key_id) if key_id else None
        if key is None or not key.matches(secret):
            raise self.refuse(unauthorized("the API key is unknown or revoked"))
        if len(self.verified) >= CACHED:
            self.verified.clear()
        self.verified[header] = key
        return key

    def changed(self) -> None:
        """Keys were created or revoked through this edge: reload before the next check. (Other
        edges see it within KEYS_REFRESH_S.)"""
        self.due = 0.0

    def refuse(self, problem: Problem) -> Problem:
        self.metrics.refused.inc(str(problem.status))
        return problem

    async def fresh(self) -> None:
        """Reload the copy of the keys when it is due: the first request to find it due starts
        one reload and every request that finds it due waits for it. Without any copy, a 503."""
        if self.reload is None and self.clock() >= self.due:
            self.reload = asyncio.ensure_future(self._reload())
        if self.reload is not None:
            await asyncio.shield(self.reload)
        if not self.ready:
            raise Problem(503, "unavailable", "cannot read the API keys from Postgres")

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
