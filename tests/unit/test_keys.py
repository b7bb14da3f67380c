"""API keys without I/O: secrets, digests, scopes and globs, the routes' needs, and the limits."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest

from functions.auth import STALE_WAIT_S, Guard
from functions.limits import KeyRate
from functions.table import TABLE
from infra.errors import InvalidKey
from infra.keys import Key, Need, check_scopes, identify, new
from infra.observe.metrics import Metrics
from infra.settings import Settings, loopback

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def key(*scopes: str) -> Key:
    made, _ = new("k", list(scopes), NOW)
    return made


def test_a_secret_is_recognisable_random_and_kept_only_as_a_digest() -> None:
    made, secret = new("ops", ["admin"], NOW)
    assert secret.startswith("nmr_") and identify(secret) == made.id
    assert made.matches(secret) and not made.matches(secret + "x")
    assert secret.encode() not in made.digest and len(made.digest) == 32
    others = {new("ops", ["admin"], NOW)[1] for _ in range(200)}
    assert len(others) == 200
    assert identify("nmr_abc") is None and identify("Bearer x") is None


def test_scopes_allow_what_they_name() -> None:
    assert key("admin").allows(Need.ADMIN) and key("admin").allows(Need.NEXT, "any")
    assert key("read").allows(Need.READ) and not key("read").allows(Need.NEXT, "inv")
    inv = key("next:inv-*", "next:po-?")
    assert inv.allows(Need.NEXT, "inv-2026") and inv.allows(Need.NEXT, "po-1")
    assert not inv.allows(Need.NEXT, "INV-2026")  # case-sensitive, as counter names are
    assert not inv.allows(Need.NEXT, "po-12") and not inv.allows(Need.READ)
    assert not inv.allows(Need.ADMIN) and inv.allows(Need.ANY)
    assert key("next:*").allows(Need.NEXT, "whatever")


@pytest.mark.parametrize(
    "scopes", [[], ["root"], ["next:"], ["next:a b"], ["admin"] * 33, "admin", [1], None]
)
def test_malformed_scopes_are_refused(scopes: object) -> None:
    with pytest.raises(InvalidKey):
        check_scopes(scopes)


def needs(method: str, path: str) -> object:
    return TABLE.need(method, path, TABLE.next_counter(method, path))


def test_what_each_route_needs() -> None:
    assert needs("GET", "/healthz") is None and needs("GET", "/openapi.json") is None
    assert needs("POST", "/counters/inv/next") == (Need.NEXT, "inv")
    assert needs("POST", "/counters") == (Need.ADMIN, "")
    assert needs("GET", "/keys") == (Need.ADMIN, "") and needs("DELETE", "/keys/x")[0] is Need.ADMIN  # type: ignore[index]
    assert (
        needs("GET", "/counters/inv") == (Need.READ, "")
        and needs("GET", "/metrics")[0] is Need.READ
    )  # type: ignore[index]
    assert needs("PUT", "/counters/inv") == (Need.ANY, "")
    assert needs("PATCH", "/counters/inv") == (Need.ADMIN, "")
    assert needs("POST", "/counters/inv/void") == (Need.NEXT, "inv")
    assert needs("GET", "/counters/inv/report") == (Need.READ, "")
    assert needs("GET", "/audit/verify") == (Need.READ, "")
    assert needs("POST", "/audit/verify") == (Need.READ, "")  # it posts anchored heads, reads
    assert needs("POST", "/healthz") is None  # an open path is open to every method (a 405)
    assert needs("PUT", "/keys") == (Need.ADMIN, "")  # so is an admin path to admin keys
    assert needs("GET", "/counters/inv/next") == (Need.READ, "")  # a 405 after, as a 404
    assert needs("POST", "/nowhere") == (Need.ANY, "") and needs("HEAD", "/x") == (Need.READ, "")


def test_the_fast_path_reads_the_counter_from_the_table_s_path() -> None:
    assert TABLE.next_counter("POST", "/counters/inv-2026/next") == "inv-2026"
    assert TABLE.next_counter("POST", "/counters//next") == ""  # a 422 names the empty name
    for method, path in [
        ("GET", "/counters/inv/next"),
        ("POST", "/counters/next"),
        ("POST", "/counters/a/b/next"),
        ("POST", "/counters/inv/void"),
    ]:
        assert TABLE.next_counter(method, path) is None


def test_auth_none_is_refused_unless_loopback_or_behind_an_authorizer() -> None:
    none = Settings.of(auth="none")
    assert none.open_to("127.0.0.1") is None and none.open_to("::1") is None
    assert none.open_to("localhost") is None
    assert "AUTHORIZER" in (none.open_to("0.0.0.0") or "")
    assert "AUTHORIZER" in (none.open_to(None) or "")  # Lambda
    assert Settings.of(auth="none", authorizer="iam").open_to(None) is None
    assert Settings.of().open_to("0.0.0.0") is None  # AUTH=keys
    assert loopback("127.8.9.1") and not loopback("10.0.0.1") and not loopback("example.org")


def test_idempotency_keys_per_client_per_second() -> None:
    now = [0.0]
    rate = KeyRate(10, clock=lambda: now[0])
    assert all(rate.take("a") == 0 for _ in range(10))
    wait = rate.take("a")
    assert 0 < wait <= 0.1
    assert rate.take("b") == 0  # every client has its own bucket
    now[0] += 0.1
    assert rate.take("a") == 0 and rate.take("a") > 0


class Stalling:
    """Keys in Postgres that answer once, then hang as an unreachable Postgres's pool does."""

    def __init__(self) -> None:
        self.calls = 0

    async def touch_keys(self, used: object) -> None:
        return None

    async def keys(self) -> list[Key]:
        self.calls += 1
        if self.calls > 1:
            await asyncio.sleep(30)
        return []


async def test_a_stalled_reload_holds_a_request_briefly_when_a_copy_is_in_hand() -> None:
    """With Postgres unreachable, /metrics and every request went on with the copy of the keys
    only after the pool's timeout (2 s): Prometheus's scrape timed out, so the outage's own
    alert could not fire. With a copy in hand, a request waits STALE_WAIT_S at most."""
    now = [0.0]
    guard = Guard(Stalling(), 5.0, Metrics(), clock=lambda: now[0])  # type: ignore[arg-type]
    await guard.fresh()
    assert guard.ready
    now[0] = 6.0  # the copy is due again; Postgres stalls now
    began = time.monotonic()
    await guard.fresh()
    assert time.monotonic() - began < STALE_WAIT_S + 0.5
    assert guard.reload is not None and not guard.reload.done()  # it goes on in the background
    guard.reload.cancel()


async def test_a_request_that_comes_late_into_a_stalled_reload_goes_on_at_once() -> None:
    """With a copy in hand, the requests wait STALE_WAIT_S from the reload's start at most, not
    each its own STALE_WAIT_S: during an outage every request paid 0.2 s."""
    now = [0.0]
    guard = Guard(Stalling(), 5.0, Metrics(), clock=lambda: now[0])  # type: ignore[arg-type]
    await guard.fresh()
    now[0] = 6.0  # the copy is due again; Postgres stalls now
    first = asyncio.create_task(guard.fresh())
    await asyncio.sleep(STALE_WAIT_S + 0.1)
    assert first.done()
    began = time.monotonic()
    await guard.fresh()
    assert time.monotonic() - began < STALE_WAIT_S / 4
    assert guard.reload is not None and not guard.reload.done()
    guard.reload.cancel()


async def test_without_a_copy_a_request_waits_for_the_reload() -> None:
    store = Stalling()
    store.calls = 1  # it stalls from the start
    guard = Guard(store, 5.0, Metrics())  # type: ignore[arg-type]
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(STALE_WAIT_S * 3):
            await guard.fresh()
    assert not guard.ready
