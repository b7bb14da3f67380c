"""The HTTP API against a real Postgres: create, read, list, next, and every error."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client
from tests.checks import problem
from tests.conftest import Clock

JSON = {"content-type": "application/json"}


async def test_create_returns_201_with_location_and_defaults(
    client: httpx.AsyncClient, name: str
) -> None:
    response = await client.post("/counters", json={"name": name})
    assert response.status_code == 201
    assert response.headers["location"] == f"/counters/{name}"
    assert response.json() == {
        "name": name,
        "start": 1,
        "template": "{value}",
        "reset": "never",
        "timezone": "UTC",
        "retention_days": None,
        "confirm": "none",
    }


async def test_create_twice_is_409(client: httpx.AsyncClient, name: str) -> None:
    assert (await client.post("/counters", json={"name": name})).status_code == 201
    problem(await client.post("/counters", json={"name": name}), 409, "counter-exists")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "-leading-dash"}, "name"),
        ({"name": "x" * 129}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": 7}, "name"),
        ({}, "name"),
        ({"name": "ok", "start": -1}, "start"),
        ({"name": "ok", "start": "1"}, "start"),
        ({"name": "ok", "start": True}, "start"),
        ({"name": "ok", "start": 2**63}, "start"),
        ({"name": "ok", "template": "{value"}, "template"),
        ({"name": "ok", "template": "no value field"}, "template"),
        ({"name": "ok", "template": "{value:06q}"}, "template"),
        ({"name": "ok", "template": "{value}{secret}"}, "template"),
        ({"name": "ok", "template": "{value!r}"}, "template"),
        ({"name": "ok", "template": "{value.real}"}, "template"),
        ({"name": "ok", "template": ""}, "template"),
        ({"name": "ok", "template": 5}, "template"),
        ({"name": "ok", "reset": "weekly"}, "reset"),
        ({"name": "ok", "timezone": "Mars/Olympus"}, "timezone"),
        ({"name": "ok", "timezone": ""}, "timezone"),
        ({"name": "ok", "timezone": {}}, "timezone"),
        ({"name": "ok", "timezone": ["UTC"]}, "timezone"),
        ({"name": "ok", "reset": []}, "reset"),
        ({"name": "ok", "template": {}}, "template"),
        ({"name": "ok", "start": 1.5}, "start"),
        ({"name": "ok", "colour": "red"}, "colour"),
    ],
)
async def test_create_rejects_each_malformed_field_with_422(
    client: httpx.AsyncClient, body: dict[str, object], field: str
) -> None:
    body = problem(await client.post("/counters", json=body), 422, "invalid-request")
    assert body["field"] == field


@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", b"null", b"", b"\xff\xfe", b'"name"'])
async def test_create_rejects_malformed_json_with_422(
    client: httpx.AsyncClient, raw: bytes
) -> None:
    response = await client.post(
        "/counters", content=raw, headers={"content-type": "application/json"}
    )
    problem(response, 422, "invalid-request")


async def test_oversized_body_is_413(client: httpx.AsyncClient) -> None:
    big = b'{"name": "' + b"x" * 20_000 + b'"}'
    problem(await client.post("/counters", content=big, headers=JSON), 413, "body-too-large")


async def test_oversized_chunked_body_is_413(client: httpx.AsyncClient) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(40):
            yield b"x" * 1000

    problem(await client.post("/counters", content=chunks(), headers=JSON), 413, "body-too-large")


async def test_get_returns_settings_and_current_value(client: httpx.AsyncClient, name: str) -> None:
    await client.post("/counters", json={"name": name, "start": 100})
    body = (await client.get(f"/counters/{name}")).json()
    assert body["value"] is None
    assert body["period"] == ""
    await client.post(f"/counters/{name}/next", params={"count": 5})
    body = (await client.get(f"/counters/{name}")).json()
    assert body["value"] == 104
    assert body["start"] == 100


async def test_unknown_counter_is_404(client: httpx.AsyncClient, name: str) -> None:
    problem(await client.get(f"/counters/{name}"), 404, "counter-not-found")
    problem(await client.post(f"/counters/{name}/next"), 404, "counter-not-found")


async def test_unknown_route_and_method_are_problems(client: httpx.AsyncClient) -> None:
    problem(await client.get("/nowhere"), 404, "not-found")
    problem(await client.delete("/counters"), 405, "method-not-allowed")


async def test_next_returns_consecutive_values(client: httpx.AsyncClient, name: str) -> None:
    await client.post("/counters", json={"name": name})
    first = (await client.post(f"/counters/{name}/next")).json()
    assert first == {"counter": name, "value": 1, "formatted": "1"}
    many = (await client.post(f"/counters/{name}/next", params={"count": 3})).json()
    assert many["first"] == 2 and many["last"] == 4
    assert [v["value"] for v in many["values"]] == [2, 3, 4]
    assert [v["formatted"] for v in many["values"]] == ["2", "3", "4"]


@pytest.mark.parametrize(
    "count", ["0", "1001", "-1", "abc", "1.5", "", "99999999999999999999", "¹²", "٣"]
)
async def test_next_rejects_bad_count_with_422(
    client: httpx.AsyncClient, name: str, count: str
) -> None:
    await client.post("/counters", json={"name": name})
    body = problem(
        await client.post(f"/counters/{name}/next", params={"count": count}), 422, "invalid-request"
    )
    assert body["field"] == "count"


async def test_next_count_1000_is_allowed(client: httpx.AsyncClient, name: str) -> None:
    await client.post("/counters", json={"name": name})
    body = (await client.post(f"/counters/{name}/next", params={"count": 1000})).json()
    assert (body["first"], body["last"], len(body["values"])) == (1, 1000, 1000)


async def test_next_rejects_bad_name_and_key_with_422(client: httpx.AsyncClient) -> None:
    problem(await client.post("/counters/-bad/next"), 422, "invalid-request")
    response = await client.post("/counters/fine/next", headers={"Idempotency-Key": "a b"})
    problem(response, 422, "invalid-request")
    response = await client.post("/counters/fine/next", headers={"Idempotency-Key": "k" * 201})
    problem(response, 422, "invalid-request")


async def test_template_renders_value_and_date(
    client: httpx.AsyncClient, name: str, clock: Clock
) -> None:
    await client.post(
        "/counters",
        json={"name": name, "template": "INV-{yyyy}/{yy}{mm}{dd}-{value:06d}", "start": 42},
    )
    body = (await client.post(f"/counters/{name}/next")).json()
    today = clock.now.date()
    expected = f"INV-{today:%Y}/{today:%y%m%d}-000042"
    assert body == {"counter": name, "value": 42, "formatted": expected}


async def test_yearly_reset_restarts_at_start_in_each_year(
    client: httpx.AsyncClient, name: str, clock: Clock
) -> None:
    from datetime import UTC, datetime

    clock.now = datetime(2026, 12, 31, 22, 0, tzinfo=UTC)
    await client.post(
        "/counters",
        json={"name": name, "template": "INV-{yyyy}-{value:06d}", "reset": "yearly"},
    )
    one = (await client.post(f"/counters/{name}/next")).json()
    two = (await client.post(f"/counters/{name}/next")).json()
    assert (one["formatted"], two["formatted"]) == ("INV-2026-000001", "INV-2026-000002")
    clock.advance(hours=3)
    three = (await client.post(f"/counters/{name}/next")).json()
    assert three["formatted"] == "INV-2027-000001"
    body = (await client.get(f"/counters/{name}")).json()
    assert (body["period"], body["value"]) == ("2027", 1)


async def test_daily_reset_follows_the_counters_time_zone(
    client: httpx.AsyncClient, name: str, clock: Clock
) -> None:
    from datetime import UTC, datetime

    # 23:30 UTC on 1 March is already 2 March in Tokyo (UTC+9)
    clock.now = datetime(2026, 3, 1, 14, 30, tzinfo=UTC)
    await client.post(
        "/counters",
        json={
            "name": name,
            "template": "{yyyy}{mm}{dd}-{value}",
            "reset": "daily",
            "timezone": "Asia/Tokyo",
            "start": 10,
        },
    )
    assert (await client.post(f"/counters/{name}/next")).json()["formatted"] == "20260301-10"
    assert (await client.post(f"/counters/{name}/next")).json()["formatted"] == "20260301-11"
    clock.now = datetime(2026, 3, 1, 15, 0, tzinfo=UTC)  # midnight in Tokyo
    assert (await client.post(f"/counters/{name}/next")).json()["formatted"] == "20260302-10"


async def test_monthly_reset(client: httpx.AsyncClient, name: str, clock: Clock) -> None:
    from datetime import UTC, datetime

    clock.now = datetime(2026, 1, 31, 12, tzinfo=UTC)
    await client.post(
        "/counters", json={"name": name, "reset": "monthly", "template": "{yyyy}-{mm}/{value}"}
    )
    assert (await client.post(f"/counters/{name}/next")).json()["formatted"] == "2026-01/1"
    clock.now = datetime(2026, 2, 1, 0, 0, 1, tzinfo=UTC)
    assert (await client.post(f"/counters/{name}/next")).json()["formatted"] == "2026-02/1"
    assert (await client.post(f"/counters/{name}/next")).json()["formatted"] == "2026-02/2"


async def test_idempotency_key_returns_the_same_values(
    client: httpx.AsyncClient, name: str
) -> None:
    await client.post("/counters", json={"name": name})
    headers = {"Idempotency-Key": "order-7"}
    first = (
        await client.post(f"/counters/{name}/next", params={"count": 3}, headers=headers)
    ).json()
    await client.post(f"/counters/{name}/next")
    again = (
        await client.post(f"/counters/{name}/next", params={"count": 3}, headers=headers)
    ).json()
    assert again == first
    assert first["first"] == 1
    fresh = (await client.post(f"/counters/{name}/next")).json()
    assert fresh["value"] == 5


async def test_idempotency_key_is_per_counter(client: httpx.AsyncClient, name: str) -> None:
    other = name + "-b"
    await client.post("/counters", json={"name": name})
    await client.post("/counters", json={"name": other, "start": 500})
    headers = {"Idempotency-Key": "same"}
    a = (await client.post(f"/counters/{name}/next", headers=headers)).json()
    b = (await client.post(f"/counters/{other}/next", headers=headers)).json()
    assert (a["value"], b["value"]) == (1, 500)


async def test_idempotency_key_reused_with_another_count_is_422(
    client: httpx.AsyncClient, name: str
) -> None:
    await client.post("/counters", json={"name": name})
    headers = {"Idempotency-Key": "k1"}
    await client.post(f"/counters/{name}/next", headers=headers)
    response = await client.post(f"/counters/{name}/next", params={"count": 2}, headers=headers)
    problem(response, 422, "idempotency-key-reused")


async def test_concurrent_retries_with_one_key_get_one_allocation(
    client: httpx.AsyncClient, name: str
) -> None:
    import asyncio

    await client.post("/counters", json={"name": name})
    headers = {"Idempotency-Key": "burst"}
    bodies = await asyncio.gather(
        *(client.post(f"/counters/{name}/next", headers=headers) for _ in range(50))
    )
    assert {b.json()["value"] for b in bodies} == {1}
    assert (await client.post(f"/counters/{name}/next")).json()["value"] == 2


async def test_idempotency_key_expires_after_retention(
    client: httpx.AsyncClient, name: str, stack: object, database_url: str
) -> None:
    import psycopg

    await client.post("/counters", json={"name": name})
    headers = {"Idempotency-Key": "old"}
    first = (await client.post(f"/counters/{name}/next", headers=headers)).json()
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(
            "UPDATE idempotency_keys SET expires_at = now() - interval '1 second'"
            " WHERE counter = %s",
            (name,),
        )
    again = (await client.post(f"/counters/{name}/next", headers=headers)).json()
    assert again["value"] == first["value"] + 1


async def test_list_pages_through_every_counter(client: httpx.AsyncClient, name: str) -> None:
    names = sorted(f"{name}-{i:02d}" for i in range(7))
    for n in names:
        await client.post("/counters", json={"name": n})
    seen: list[str] = []
    after = name
    while True:
        page = (await client.get("/counters", params={"limit": 3, "after": after})).json()
        seen += [c["name"] for c in page["counters"] if c["name"].startswith(name)]
        if page["next"] is None or not page["counters"][-1]["name"].startswith(name):
            break
        after = page["next"]
    assert seen == names


@pytest.mark.parametrize(
    "params", [{"limit": "0"}, {"limit": "1001"}, {"limit": "x"}, {"limit": "²"}, {"after": "-bad"}]
)
async def test_list_rejects_bad_paging_with_422(
    client: httpx.AsyncClient, params: dict[str, str]
) -> None:
    problem(await client.get("/counters", params=params), 422, "invalid-request")


async def test_healthz_and_openapi(client: httpx.AsyncClient) -> None:
    health = await client.get("/healthz")
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    schema = (await client.get("/openapi.json")).json()
    assert schema["openapi"].startswith("3.")
    assert "/counters/{name}/next" in schema["paths"]


async def test_metrics_count_requests_values_and_frames(
    client: httpx.AsyncClient, name: str
) -> None:
    import asyncio

    await client.post("/counters", json={"name": name})
    await asyncio.gather(*(client.post(f"/counters/{name}/next") for _ in range(40)))
    await client.post(f"/counters/{name}/next", params={"count": 10})
    text = (await client.get("/metrics")).text
    values = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert values["numerator_next_requests_total"] == 41
    assert values["numerator_values_allocated_total"] == 50
    # the lane: concurrent plain requests share a record (one a counter a turn of the loop);
    # the request for 10 values is a record of its own
    assert 2 <= values["numerator_records_in_total"] < 41
    assert values["numerator_records_out_total"] == values["numerator_records_in_total"]
    assert values["numerator_records_put_total"] == values["numerator_records_in_total"]
    # 40 concurrent requests share frames: fewer transactions than requests
    assert 2 <= values["numerator_frames_committed_total"] < 41
    assert (
        values["numerator_frame_size_records_count"] == values["numerator_frames_committed_total"]
    )
    assert values['numerator_reply_wait_seconds_bucket{le="+Inf"}'] == 41
    assert "numerator_dead_letters_total" in values


async def test_a_body_that_does_not_arrive_in_time_is_408(settings: Settings) -> None:
    """A client that announces a body and never sends it holds the request BODY_TIMEOUT_S at
    most, then gets a problem."""
    async with EmbeddedStack(settings.but(body_timeout_s=0.2)) as stack:
        app = stack.app()
        sent: list[dict[str, Any]] = []

        async def never() -> dict[str, Any]:
            await asyncio.sleep(60)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/counters",
            "raw_path": b"/counters",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"content-length", b"40"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1),
            "server": ("numerator", 80),
            "scheme": "http",
            "http_version": "1.1",
        }
        await asyncio.wait_for(app(scope, never, send), 5)  # type: ignore[arg-type]
        assert sent[0]["status"] == 408
        assert b"body-timeout" in sent[1]["body"]


async def test_the_bare_app_answers_next_through_fastpath_and_its_admission(
    stack: EmbeddedStack, name: str
) -> None:
    """The Starlette app without FastPath in front (`create_app().app`) still admits a /next
    as FastPath does (here: headers over MAX_HEADER_BYTES are a 431), never around it."""
    bare = stack.app().app
    async with asgi_client(bare) as http:
        assert (await http.post("/counters", json={"name": name})).status_code == 201
        taken = await http.post(f"/counters/{name}/next")
        assert taken.status_code == 200 and taken.json()["value"] == 1, taken.text
        huge = {"x-padding": "x" * stack.settings.edge.max_header_bytes}
        problem(await http.post(f"/counters/{name}/next", headers=huge), 431, "headers-too-large")
        assert (await http.get(f"/counters/{name}/next")).status_code == 405
        assert (await http.get(f"/counters/{name}")).json()["value"] == 1
