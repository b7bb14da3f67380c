"""What an adversarial pass found, each kept as a test: a web page acting for the local user
(a cross-site form, DNS rebinding) cannot use the trust given to loopback clients; a name or
scope that ends in a newline is refused, and every accepted name round-trips unchanged; a
query parameter or JSON key given twice, and a body not sent as JSON, are refused; a key made
or revoked through one edge is known to another at once."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from infra.counters import NAME
from infra.keys import NAME as KEY_NAME
from infra.settings import Settings
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client
from tests.checks import problem, until

LOOPBACK = ("127.0.0.1", 5000)
PAGE = "http://attacker.example:8190"  # a page the local user opened; with rebinding, its
# name resolves to 127.0.0.1, so the browser sends Host: attacker.example:8190
JSON = {"content-type": "application/json"}
FORM = {"content-type": "text/plain"}  # what a cross-site <form enctype="text/plain"> sends
NEW_KEY = b'{"name":"x","scopes":["admin"]}'

Clients = Callable[..., httpx.AsyncClient]


@pytest.fixture
async def clients(settings: Settings, fresh_database: str) -> AsyncIterator[Clients]:
    """HTTP clients of one stack with no key yet, from loopback, addressed by `host`."""
    made: list[httpx.AsyncClient] = []
    async with EmbeddedStack(settings.but(database_url=fresh_database)) as stack:
        app = stack.app()

        def client(host: str = "127.0.0.1:8190", **headers: str) -> httpx.AsyncClient:
            http = asgi_client(app, client=LOOPBACK, base_url=f"http://{host}", headers=headers)
            made.append(http)
            return http

        yield client
        for http in made:
            await http.aclose()


async def no_keys(clients: Clients) -> None:
    listed = await clients().get("/keys")
    assert listed.status_code == 200 and listed.json() == {"keys": []}, listed.text


async def test_a_cross_site_form_cannot_create_the_first_key(clients: Clients) -> None:
    """The reproduction from the finding: 201 with a secret before, 403 now."""
    page = clients("attacker.example:8190", origin=PAGE)
    refused = await page.post("/keys", content=NEW_KEY, headers=FORM)
    assert "Host" in problem(refused, 403, "cross-site")["detail"]
    # The same form from a page of another origin, sent to the service by its own address:
    other = clients(origin=PAGE)
    assert (
        "Origin" in problem(await other.post("/keys", content=NEW_KEY), 403, "cross-site")["detail"]
    )
    await no_keys(clients)


async def test_a_rebinding_page_can_neither_read_nor_take_values(clients: Clients) -> None:
    own = clients()
    assert (await own.post("/counters", json={"name": "inv"})).status_code == 201
    rebound = clients("attacker.example:8190")  # same origin as far as the browser knows
    problem(await rebound.get("/counters"), 403, "cross-site")
    problem(await rebound.post("/counters/inv/next"), 403, "cross-site")
    form = clients(origin=PAGE)  # a cross-site form POST to /next (no body needed)
    problem(await form.post("/counters/inv/next"), 403, "cross-site")
    fetch = clients(**{"sec-fetch-site": "cross-site"})
    problem(await fetch.post("/counters/inv/next"), 403, "cross-site")
    assert (await own.get("/counters/inv")).json()["value"] is None, "nothing was taken"


@pytest.mark.parametrize("host", ["127.0.0.1:8190", "localhost:8190", "[::1]:8190", "localhost"])
async def test_the_users_own_clients_are_served(clients: Clients, host: str) -> None:
    own = clients(host, origin=f"http://{host}")  # a page the service itself served, say
    made = await own.post("/counters", json={"name": "own"})
    assert made.status_code == 201, made.text
    assert (await own.post("/counters/own/next")).status_code == 200


async def test_a_json_body_must_be_sent_as_json(clients: Clients) -> None:
    own = clients()
    body = b'{"name": "typed"}'
    problem(await own.post("/counters", content=body, headers=FORM), 415, "unsupported-media-type")
    problem(await own.post("/counters", content=body), 415, "unsupported-media-type")
    problem(await own.post("/keys", content=NEW_KEY, headers=FORM), 415, "unsupported-media-type")
    typed = await own.post(
        "/counters", content=body, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert typed.status_code == 201, typed.text
    await no_keys(clients)


async def test_a_json_key_given_twice_is_refused(clients: Clients) -> None:
    own = clients()
    twice = b'{"name": "first", "name": "second"}'
    assert (
        problem(await own.post("/counters", content=twice, headers=JSON), 422, "invalid-request")[
            "field"
        ]
        == "name"
    )
    key = b'{"name": "k", "scopes": ["admin"], "scopes": ["read"]}'
    problem(await own.post("/keys", content=key, headers=JSON), 422, "invalid-request")
    assert (await own.get("/counters")).json()["counters"] == []
    await no_keys(clients)


async def test_a_query_parameter_given_twice_is_refused(clients: Clients) -> None:
    own = clients()
    assert (await own.post("/counters", json={"name": "q"})).status_code == 201
    body = problem(await own.post("/counters/q/next?count=1&count=2"), 422, "invalid-request")
    assert body["field"] == "count"
    problem(await own.get("/counters?limit=1&limit=2"), 422, "invalid-request")
    assert (await own.get("/counters/q")).json()["value"] is None, "nothing was taken"
    assert (await own.post("/counters/q/next?count=2")).json()["last"] == 2


async def test_a_query_parameter_next_does_not_take_is_refused_not_ignored(
    clients: Clients,
) -> None:
    """`?cout=5` (a typo of `count`) was one value, the typo unseen: 422 naming it, nothing
    taken; `count` alone and no query at all still serve."""
    own = clients()
    assert (await own.post("/counters", json={"name": "t"})).status_code == 201
    body = problem(await own.post("/counters/t/next?cout=5"), 422, "invalid-request")
    assert body["field"] == "cout" and "cout" in body["detail"]
    body = problem(await own.post("/counters/t/next?count=2&dry=1"), 422, "invalid-request")
    assert body["field"] == "dry"
    assert (await own.get("/counters/t")).json()["value"] is None, "nothing was taken"
    assert (await own.post("/counters/t/next?count=2")).json()["last"] == 2
    assert (await own.post("/counters/t/next")).json()["value"] == 3


async def test_a_body_on_next_is_refused_not_ignored(clients: Clients) -> None:
    """Issue 51, item 7: `{"count": 5}` in /next's body returned one value; a chunked body was
    taken too. /next takes no body: 422 naming it, nothing taken."""
    own = clients()
    assert (await own.post("/counters", json={"name": "b"})).status_code == 201
    body = problem(await own.post("/counters/b/next", json={"count": 5}), 422, "invalid-request")
    assert body["field"] == "body" and "?count=N" in body["detail"]

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"count": 5}'

    chunked = await own.post("/counters/b/next", content=chunks())
    assert problem(chunked, 422, "invalid-request")["field"] == "body"
    assert (await own.get("/counters/b")).json()["value"] is None, "nothing was taken"
    assert (await own.post("/counters/b/next")).json()["value"] == 1


@pytest.mark.parametrize("header", ["Idempotency-Key", "Authorization"])
async def test_a_header_that_may_come_once_is_refused_twice(clients: Clients, header: str) -> None:
    """Issue 51, item 7: with two Idempotency-Keys (or two Authorizations) the last won,
    silently. 400 naming the header, on /next and every other route; nothing taken."""
    own = clients()
    assert (await own.post("/counters", json={"name": "h"})).status_code == 201
    twice = [(header, "one"), (header, "two")]
    for method, path in (("POST", "/counters/h/next"), ("GET", "/counters/h")):
        answer = await own.request(method, path, headers=twice)
        assert header in problem(answer, 400, "repeated-header")["detail"], answer.text
    assert (await own.get("/counters/h")).json()["value"] is None, "nothing was taken"


@pytest.mark.parametrize("name", ["ab\n", "ab\r\n", "\nab", "ab\x00"])
async def test_a_name_ending_in_a_newline_is_refused_everywhere(
    clients: Clients, name: str
) -> None:
    own = clients()
    problem(await own.post("/counters", json={"name": name}), 422, "invalid-request")
    assert (await own.post("/counters", json={"name": "ab"})).status_code == 201
    path = "/counters/" + quote(name)
    problem(await own.get(path), 422, "invalid-request")
    problem(await own.post(path + "/next"), 422, "invalid-request")
    refused = await own.post("/keys", json={"name": name, "scopes": ["admin"]})
    problem(refused, 422, "invalid-request")
    assert [c["name"] for c in (await own.get("/counters")).json()["counters"]] == ["ab"]
    await no_keys(clients)


@pytest.mark.parametrize(
    "scope", ["next:inv\n", "next:[", "next:[]", "next:[!]", "admin\n", "read\n"]
)
async def test_a_malformed_scope_is_refused(clients: Clients, scope: str) -> None:
    own = clients()
    refused = await own.post("/keys", json={"name": "k", "scopes": [scope]})
    assert problem(refused, 422, "invalid-request")["field"] == "scopes"
    await no_keys(clients)


@pytest.fixture
async def admin(settings: Settings, fresh_database: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a stack with an admin key, sending it."""
    async with (
        EmbeddedStack(settings.but(database_url=fresh_database)) as stack,
        asgi_client(stack.app(), client=LOOPBACK) as http,
    ):
        first = await http.post("/keys", json={"name": "root", "scopes": ["admin"]})
        http.headers["authorization"] = f"Bearer {first.json()['secret']}"
        yield http


@hypothesis_settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(counter=st.from_regex(NAME, fullmatch=True), key=st.from_regex(KEY_NAME, fullmatch=True))
async def test_every_accepted_name_round_trips_unchanged(
    admin: httpx.AsyncClient, counter: str, key: str
) -> None:
    """A name the checks accept comes back the same through the path, the Location header,
    the counter list and the key list (the CLI prints what these answers hold)."""
    made = await admin.post("/counters", json={"name": counter})
    assert made.status_code in (201, 409), made.text  # 409: an earlier example's name
    if made.status_code == 201:
        assert made.headers["location"] == f"/counters/{counter}"
        assert made.json()["name"] == counter
    read = await admin.get(f"/counters/{counter}")
    assert read.status_code == 200 and read.json()["name"] == counter
    took = await admin.post(f"/counters/{counter}/next")
    assert took.status_code == 200 and took.json()["counter"] == counter
    listed = await admin.get("/counters", params={"limit": 1000})
    assert counter in [c["name"] for c in listed.json()["counters"]]
    made = await admin.post("/keys", json={"name": key, "scopes": ["read"]})
    assert made.status_code in (201, 409), made.text
    if made.status_code == 201:
        assert made.headers["location"] == f"/keys/{key}"
        assert made.json()["name"] == key
    assert key in [k["name"] for k in (await admin.get("/keys")).json()["keys"]]


async def test_a_key_made_or_revoked_through_one_edge_is_known_to_another_at_once(
    settings: Settings, fresh_database: str
) -> None:
    """Two edges on one Postgres, as two workers are, each with a copy of the keys reloaded
    only every 5 s: a new key works on the other at once (an unknown key reloads the copy),
    and a revoked one stops there at once (it follows Postgres's NOTIFY)."""
    slow = settings.but(database_url=fresh_database, keys_refresh_s=5.0)
    async with (
        EmbeddedStack(slow) as one,
        EmbeddedStack(slow) as other,
        other.edge.following_keys(),
    ):
        first = asgi_client(one.app(), client=LOOPBACK)
        second = asgi_client(other.app(), client=LOOPBACK)
        async with first, second:
            root = (await first.post("/keys", json={"name": "root", "scopes": ["admin"]})).json()
            admin = {"authorization": f"Bearer {root['secret']}"}
            assert (await second.get("/counters", headers=admin)).status_code == 200
            made = await first.post(
                "/keys", json={"name": "reader", "scopes": ["read"]}, headers=admin
            )
            reader = {"authorization": f"Bearer {made.json()['secret']}"}
            assert (await second.get("/counters", headers=reader)).status_code == 200, "new"
            revoked = time.monotonic()
            assert (await first.delete("/keys/reader", headers=admin)).status_code == 200

            async def refused() -> bool:
                return (await second.get("/counters", headers=reader)).status_code == 401

            took = await until(refused, within=1.0)
            print(f"the revoked key was refused by the other edge after {took * 1000:.0f} ms")
            assert time.monotonic() - revoked < 1.0 < slow.edge.keys_refresh_s
