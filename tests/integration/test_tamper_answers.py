"""The tables the batchers read for an answer, held to the chain by `audit verify` (issue 51,
items 3 and 4): `idempotency_keys` (a retry's answer) and `counters` (`start`, the reset and the
time zone). Each edit is made by SQL to the tamper suite's live trail (tests/tamper.py's
`Tampered`, the fixture `tampered`: 30 values of `inv`, voids, heads), after first proving the
untouched trail sound, and each is named by `audit verify` (GET): the table and the row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from tests.tamper import NAME, Tampered, named, take

pytestmark = pytest.mark.slow  # each test a database of its own (the tamper suite's fixture)


async def keyed(client: httpx.AsyncClient, key: str, count: int = 1) -> dict[str, Any]:
    answer = await client.post(
        f"/counters/{NAME}/next", params={"count": count}, headers={"Idempotency-Key": key}
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def sound(tampered: Tampered) -> None:
    found = await tampered.verify()
    assert found["ok"], found["breaches"]


async def test_a_keys_row_repointed_at_another_requests_values(tampered: Tampered) -> None:
    """The issue's edit: a retry with the key then received values already delivered to
    another request."""
    mine = await keyed(tampered.client, "order-17", 3)
    theirs = (await take(tampered.client, 3)).json()
    assert mine["last"] < theirs["first"]
    await sound(tampered)
    await tampered.rows(
        "UPDATE idempotency_keys SET first = %s, last = %s WHERE counter = %s AND key = %s",
        theirs["first"],
        theirs["last"],
        NAME,
        "order-17",
    )
    retry = await keyed(tampered.client, "order-17", 3)
    assert retry["first"] == theirs["first"], "the batchers answer retries from this table"
    (hit,) = named(await tampered.verify(), "idempotency_keys", f"{NAME}/order-17")
    assert f"gave this key {mine['first']}-{mine['last']}" in hit["why"], hit


async def test_a_key_forged(tampered: Tampered) -> None:
    await sound(tampered)
    await tampered.rows(
        "INSERT INTO idempotency_keys (counter, key, count, first, last, day, expires_at)"
        " VALUES (%s, 'never-sent', 2, 7, 8, current_date, now() + interval '1 day')",
        NAME,
    )
    (hit,) = named(await tampered.verify(), "idempotency_keys", f"{NAME}/never-sent")
    assert "no audit row" in hit["why"]


async def test_a_keys_day_moved(tampered: Tampered) -> None:
    """The day renders the number (`INV-{yyyy}-…`): a retry would get another one."""
    await keyed(tampered.client, "order-18")
    await sound(tampered)
    await tampered.rows(
        "UPDATE idempotency_keys SET day = day - 400 WHERE counter = %s AND key = %s",
        NAME,
        "order-18",
    )
    (hit,) = named(await tampered.verify(), "idempotency_keys", f"{NAME}/order-18")
    assert "says day" in hit["why"]


async def test_a_freed_key_put_back_over_its_abandoned_values(tampered: Tampered) -> None:
    """A key whose values were voided, abandoned (no client received them), is forgotten; put
    back, a retry would deliver void values."""
    took = await keyed(tampered.client, "order-19", 2)
    await sound(tampered)
    await tampered.rows("DELETE FROM idempotency_keys WHERE key = 'order-19'")
    await tampered.client.post(
        f"/counters/{NAME}/void",
        json={"first": took["first"], "last": took["last"], "reason": "spoiled"},
    )
    await sound(tampered)
    await tampered.rows(
        "INSERT INTO idempotency_keys (counter, key, count, first, last, day, expires_at)"
        " VALUES (%s, 'order-19', 2, %s, %s, current_date, now() + interval '1 day')",
        NAME,
        took["first"],
        took["last"],
    )
    assert (await tampered.verify())["ok"], "a user's void: the key's values stand"
    await tampered.rows(
        "UPDATE allocation_frames SET detail = replace(detail::text, '\"spoiled\"',"
        " '\"abandoned\"')::json WHERE detail::text LIKE '%%\"spoiled\"%%'"
    )
    found = await tampered.verify()
    assert any("abandoned" in b["why"] for b in named(found, "idempotency_keys")), found


async def test_a_counters_start_moved_with_its_values_adjusted(tampered: Tampered) -> None:
    """The issue's edit: the report said "handed out twice"; verify names the counter."""
    await sound(tampered)
    await tampered.rows("UPDATE counters SET start = 11 WHERE name = %s", NAME)
    await tampered.rows("UPDATE counter_values SET allocated = 20 WHERE counter = %s", NAME)
    found = await tampered.verify()
    (hit,) = named(found, "counters", NAME)
    assert "says start 11" in hit["why"] and "handed out 1 first" in hit["why"], hit
    assert [b["table"] for b in found["breaches"]] == ["counters"], "counter_values agrees"


async def test_a_counters_reset_changed(tampered: Tampered) -> None:
    """From never to yearly: its period '' would start again at `start` as '2026'."""
    await sound(tampered)
    await tampered.rows("UPDATE counters SET reset = 'yearly' WHERE name = %s", NAME)
    (hit,) = named(await tampered.verify(), "counters", NAME)
    assert "resets yearly" in hit["why"] and "period ''" in hit["why"], hit


def another_day() -> str:
    """A time zone whose date, now (give or take ten minutes), is not UTC's."""
    now = datetime.now(UTC)
    for name in ("Etc/GMT-14", "Etc/GMT+12"):
        days = {(now + timedelta(minutes=m)).astimezone(ZoneInfo(name)).date() for m in (-10, 10)}
        if now.date() not in days and len(days) == 1:
            return name
    raise AssertionError("UTC+14 or UTC-12 is always on another day")


async def test_a_daily_counters_time_zone_changed(tampered: Tampered) -> None:
    made = await tampered.client.post("/counters", json={"name": "day", "reset": "daily"})
    assert made.status_code == 201, made.text
    await take(tampered.client, 2, "day")
    await sound(tampered)
    zone = another_day()
    await tampered.rows("UPDATE counters SET timezone = %s WHERE name = 'day'", zone)
    (hit,) = named(await tampered.verify(), "counters", "day")
    assert f"in {zone}" in hit["why"], hit
    await tampered.rows("UPDATE counters SET timezone = 'Mars/Olympus' WHERE name = 'day'")
    (hit,) = named(await tampered.verify(), "counters", "day")
    assert "'Mars/Olympus', which is none" in hit["why"], hit
