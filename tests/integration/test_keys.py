"""API keys at the edge, on a database of each test's own: protected mode before the first key,
scopes, 401/403 problems, revocation within its bound, last use, and never a secret shown twice."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client
from tests.checks import problem, until

REMOTE = ("203.0.113.9", 40000)  # a documentation address: anything but loopback

Clients = Callable[..., httpx.AsyncClient]


@pytest.fixture
def keyed(settings: Settings, fresh_database: str) -> Settings:
    return settings.but(database_url=fresh_database, keys_refresh_s=0.2)


@pytest.fixture
async def clients(keyed: Settings) -> AsyncIterator[Clients]:
    """Make HTTP clients of one running stack: from loopback or REMOTE, with a key or none."""
    made: list[httpx.AsyncClient] = []
    async with EmbeddedStack(keyed) as stack:
        app = stack.app()

        def client(key: str | None = None, address: tuple[str, int] = REMOTE) -> httpx.AsyncClient:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            http = asgi_client(app, client=address, headers=headers)
            made.append(http)
            return http

        yield client
        for http in made:
            await http.aclose()


async def make_key(http: httpx.AsyncClient, name: str, *scopes: str) -> str:
    response = await http.post("/keys", json={"name": name, "scopes": list(scopes)})
    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    secret: str = response.json()["secret"]
    return secret


async def test_before_any_key_only_loopback_clients_are_served(clients: Clients) -> None:
    local = clients(address=("127.0.0.1", 5000))
    assert (await local.post("/counters", json={"name": "inv"})).status_code == 201
    assert (await local.post("/counters/inv/next")).status_code == 200
    ipv6 = clients(address=("::1", 5000))
    assert (await ipv6.get("/counters/inv")).status_code == 200

    remote = clients()
    refused = await remote.post("/counters/inv/next")
    body = problem(refused, 401, "unauthorized")
    assert "numerator keys create" in body["detail"]
    assert refused.headers["www-authenticate"].startswith("Bearer")
    problem(await remote.get("/counters"), 401, "unauthorized")
    assert (await remote.get("/healthz")).status_code == 200  # health checks stay open
    assert (await remote.get("/openapi.json")).status_code == 200


async def test_scopes_decide_routes_and_counters(clients: Clients) -> None:
    local = clients(address=("127.0.0.1", 5000))
    admin = clients(await make_key(local, "ops", "admin"))
    for name in ("inv-1", "inv-2", "po-1"):
        assert (await admin.post("/counters", json={"name": name})).status_code == 201
    invoices = clients(await make_key(admin, "billing", "next:inv-*"))
    reader = clients(await make_key(admin, "dashboard", "read"))

    assert (await invoices.post("/counters/inv-2/next")).json()["value"] == 1
    body = problem(await invoices.post("/counters/po-1/next"), 403, "forbidden")
    assert "po-1" in body["detail"] and "billing" in body["detail"]
    problem(await invoices.get("/counters/inv-1"), 403, "forbidden")
    problem(await invoices.post("/counters", json={"name": "inv-3"}), 403, "forbidden")
    problem(await invoices.get("/keys"), 403, "forbidden")

    assert (await reader.get("/counters/inv-2")).json()["value"] == 1
    assert (await reader.get("/metrics")).status_code == 200
    problem(await reader.post("/counters/inv-1/next"), 403, "forbidden")
    problem(await reader.post("/keys", json={"name": "x", "scopes": ["admin"]}), 403, "forbidden")

    assert (await admin.post("/counters/po-1/next")).status_code == 200
    listed = (await admin.get("/keys")).json()["keys"]
    assert sorted(k["name"] for k in listed) == ["billing", "dashboard", "ops"]
    assert all(
        set(k) == {"id", "name", "scopes", "created", "last_used", "revoked"} for k in listed
    )


async def test_once_a_key_exists_loopback_needs_one_too(clients: Clients) -> None:
    local = clients(address=("127.0.0.1", 5000))
    await make_key(local, "first", "admin")

    async def refused() -> bool:
        return (await local.get("/counters")).status_code == 401

    await until(refused, within=5)
    problem(await local.post("/counters/x/next"), 401, "unauthorized")


async def test_bad_keys_get_401_and_no_secret_is_ever_shown_or_logged(
    clients: Clients, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    local = clients(address=("127.0.0.1", 5000))
    secret = await make_key(local, "ops", "admin")
    assert secret.startswith("nmr_") and len(secret) >= 4 + 8 + 1 + 43
    tampered = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    for bad in ("", "nmr_00000000_" + "x" * 43, tampered, secret[:-3], "not-a-key"):
        response = await clients(bad or None).get("/counters")
        problem(response, 401, "unauthorized")
        assert response.headers["www-authenticate"].startswith("Bearer")
    basic = clients()
    basic.headers["Authorization"] = "Basic " + secret
    problem(await basic.get("/counters"), 401, "unauthorized")

    admin = clients(secret)
    listed = await admin.get("/keys")
    everything = listed.text + (await admin.get("/metrics")).text
    assert secret not in everything and secret[13:] not in everything
    assert not any(secret[13:] in record.getMessage() for record in caplog.records)


async def test_a_revoked_key_stops_within_the_stated_bound(
    settings: Settings, fresh_database: str
) -> None:
    """With the default KEYS_REFRESH_S (2 s), revocation takes effect within 5 s."""
    default = settings.but(database_url=fresh_database)
    assert default.edge.keys_refresh_s == Settings.of().edge.keys_refresh_s <= 5
    async with EmbeddedStack(default) as stack, asgi_client(stack.app(), client=REMOTE) as http:
        async with asgi_client(stack.app(), client=("127.0.0.1", 1)) as first:
            secret = await make_key(first, "ops", "admin")
        auth = {"Authorization": f"Bearer {secret}"}

        async def works() -> bool:
            return (await http.get("/counters", headers=auth)).status_code == 200

        await until(works, within=5)
        revoked = await http.delete("/keys/ops", headers=auth)
        assert revoked.status_code == 200 and revoked.json()["revoked"] is not None

        async def refused() -> bool:
            return (await http.get("/counters", headers=auth)).status_code == 401

        took = await until(refused, within=5)
        assert took <= default.edge.keys_refresh_s + 1
        problem(await http.delete("/keys/ops", headers=auth), 401, "unauthorized")


async def test_last_use_is_written_back_without_a_query_per_request(
    clients: Clients, keyed: Settings
) -> None:
    from infra.adapters.postgres import PostgresStore

    local = clients(address=("127.0.0.1", 5000))
    admin = clients(await make_key(local, "ops", "admin"))
    await until(lambda: _ok(admin.get("/counters")), within=5)
    store = PostgresStore(keyed.database.database_url, max_size=1)
    try:

        async def recorded() -> bool:
            await admin.get("/counters")  # a request after the refresh interval writes it back
            keys = await store.keys()
            return keys[0].last_used is not None

        await until(recorded, within=5)
    finally:
        await store.close()


async def _ok(response: Any) -> bool:
    return bool((await response).status_code == 200)


async def test_key_names_and_scopes_are_checked(clients: Clients) -> None:
    local = clients(address=("127.0.0.1", 5000))
    for body, field in [
        ({"name": "ops", "scopes": ["root"]}, "scopes"),
        ({"name": "ops", "scopes": []}, "scopes"),
        ({"name": "ops", "scopes": ["next:"]}, "scopes"),
        ({"name": "ops", "scopes": "admin"}, "scopes"),
        ({"name": "a b", "scopes": ["admin"]}, "name"),
        ({"scopes": ["admin"]}, "name"),
    ]:
        body_ = problem(await local.post("/keys", json=body), 422, "invalid-request")
        assert body_["field"] == field
    problem(await local.post("/keys", json=["admin"]), 422, "invalid-request")
    admin = clients(await make_key(local, "root", "admin"))
    await make_key(admin, "ops", "read")
    problem(await admin.post("/keys", json={"name": "ops", "scopes": ["read"]}), 409, "key-exists")
    problem(await admin.delete("/keys/nobody"), 404, "key-not-found")
    assert (await admin.delete("/keys/ops")).status_code == 200
    await make_key(admin, "ops", "read")  # a revoked key's name may be given again


async def test_too_many_idempotency_keys_get_429(settings: Settings) -> None:
    limited = settings.but(idempotency_keys_per_s=5, auth="none")
    async with EmbeddedStack(limited) as stack:
        app = stack.app()
        flood = asgi_client(app, client=("127.0.0.1", 1))
        other = asgi_client(app, client=("127.0.0.2", 1))
        async with flood, other:
            name = f"rate-{time.time_ns()}"
            assert (await flood.post("/counters", json={"name": name})).status_code == 201
            statuses = []
            for i in range(8):
                response = await flood.post(
                    f"/counters/{name}/next", headers={"Idempotency-Key": f"k{i}"}
                )
                statuses.append(response.status_code)
            assert statuses[:5] == [200] * 5 and 429 in statuses[5:], statuses
            refused = await flood.post(f"/counters/{name}/next", headers={"Idempotency-Key": "z"})
            body = problem(refused, 429, "too-many-idempotency-keys")
            assert "IDEMPOTENCY_KEYS_PER_S" in body["detail"]
            assert int(refused.headers["retry-after"]) >= 1
            assert (await flood.post(f"/counters/{name}/next")).status_code == 200  # no key
            answer = await other.post(f"/counters/{name}/next", headers={"Idempotency-Key": "k"})
            assert answer.status_code == 200  # another client has its own allowance


async def test_after_the_first_key_a_keyless_local_client_is_told_how_to_send_one(
    clients: Clients,
) -> None:
    """The first key ends keyless access from this machine too: the 401 says how the command
    line and the Python client send a key, so that a user is not left guessing."""
    local = clients(address=("127.0.0.1", 5000))
    await make_key(local, "ops", "admin")
    refused = await local.get("/counters")  # the edge that made the key knows it at once
    detail = problem(refused, 401, "unauthorized")["detail"]
    assert "--key" in detail and "NUMERATOR_KEY" in detail, detail


async def test_the_page_at_the_root_is_open_static_and_loads_nothing(clients: Clients) -> None:
    """/ is for a person with a browser, who sends no key: open like /openapi.json, before
    and after the first key, from anywhere; static, so it tells no one anything the schema
    does not, and its Content-Security-Policy lets it load and run nothing."""
    local, remote = clients(address=("127.0.0.1", 5000)), clients()
    before = await remote.get("/")
    assert before.status_code == 200 and before.headers["content-type"].startswith("text/html")
    await make_key(local, "ops", "admin")
    for http in (local, remote):
        page = await http.get("/", headers={"Origin": "http://evil.example"})
        assert page.status_code == 200 and page.text == before.text
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "/counters/{name}/next" in page.text and 'href="/openapi.json"' in page.text
    problem(await remote.post("/"), 405, "method-not-allowed")
    problem(await local.get("/counters"), 401, "unauthorized")  # the rest still needs a key
