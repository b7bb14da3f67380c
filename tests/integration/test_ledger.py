"""The ledger against a real Postgres: voids, the completeness report, the export, the hash
chains and their verification (which an UPDATE made by SQL breaks), and retention."""

from __future__ import annotations

import asyncio
import csv
import io
import re
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from infra import wire
from infra.adapters.postgres import PostgresStore
from infra.ledger import SKEW_S
from infra.observe.health import EDGE_DEAD_S
from infra.settings import Settings
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client
from tests.checks import problem, until

ROOT = Path(__file__).resolve().parents[2]


async def take(client: httpx.AsyncClient, name: str, count: int = 1) -> None:
    answer = await client.post(f"/counters/{name}/next", params={"count": count})
    assert answer.status_code == 200, answer.text


async def test_a_period_with_voids_reports_every_value_explained(
    client: httpx.AsyncClient, name: str
) -> None:
    assert (await client.post("/counters", json={"name": name})).status_code == 201
    await asyncio.gather(*(take(client, name) for _ in range(5)))
    await take(client, name, 3)
    void = {"values": [2, 3, 7], "reason": "invoice cancelled: order 17 refunded"}
    made = await client.post(f"/counters/{name}/void", json=void)
    assert made.status_code == 200, made.text
    assert made.json()["voided"] == [{"first": 2, "last": 3}, {"first": 7, "last": 7}]
    again = await client.post(f"/counters/{name}/void", json=void)
    assert again.status_code == 200 and again.json() == made.json(), "idempotent"

    other = await client.post(f"/counters/{name}/void", json={"first": 3, "reason": "typo"})
    assert "void already" in problem(other, 409, "value-already-void")["detail"]
    early = await client.post(f"/counters/{name}/void", json={"first": 9, "reason": "ahead"})
    assert "not all handed out" in problem(early, 409, "value-not-issued")["detail"]
    # numerator's own, and their look-alikes (issue 51): a zero-width space, a Cyrillic a, a Komi
    # de for d, a non-breaking hyphen, fullwidth letters
    owns = ["abandoned", "Abandoned", "abandoned ", " NOT-CONFIRMED", "ab\u200bandoned"]
    owns += ["\u200babandoned", "\u0430bandoned", "abandone\u0501", "not\u2011confirmed"]
    for own in [*owns, "\uff41\uff42\uff41\uff4e\uff44\uff4f\uff4e\uff45\uff44"]:
        mine = await client.post(f"/counters/{name}/void", json={"first": 1, "reason": own})
        assert problem(mine, 422, "invalid-request")["field"] == "reason", ascii(own)

    report = (await client.get(f"/counters/{name}/report")).json()
    assert report["issued"] == 8 and (report["first"], report["last"]) == (1, 8)
    assert report["voided"] == {"invoice cancelled: order 17 refunded": 3}
    assert [(v["first"], v["last"]) for v in report["voids"]] == [(2, 3), (7, 7)]
    assert report["unexplained_gaps"] == 0 and report["gaps"] == []
    assert report["issued_twice"] == [] and report["rising"] is True
    assert report["delivered"] == 8  # a user's void cancels what was delivered

    values = await client.post(f"/counters/{name}/next")
    assert values.json()["value"] == 9, "a void never frees a value for reuse"


async def test_a_reason_is_kept_as_nfkc_makes_it(client: httpx.AsyncClient, name: str) -> None:
    """A ligature and fullwidth digits read as their plain letters: kept so, one spelling."""
    assert (await client.post("/counters", json={"name": name})).status_code == 201
    await take(client, name)
    said = {"first": 1, "reason": "\ufb01xed order \uff11\uff17"}
    made = await client.post(f"/counters/{name}/void", json=said)
    assert made.status_code == 200 and made.json()["reason"] == "fixed order 17", made.text
    report = (await client.get(f"/counters/{name}/report")).json()
    assert report["voided"] == {"fixed order 17": 1}


async def test_the_export_says_who_took_each_value_and_round_trips(
    client: httpx.AsyncClient, name: str
) -> None:
    await client.post("/counters", json={"name": name, "template": "R-{value:04d}"})
    await take(client, name, 2)
    keyed = await client.post(
        f"/counters/{name}/next", params={"count": 3}, headers={"Idempotency-Key": "order-9"}
    )
    assert keyed.json()["first"] == 3
    await client.post(f"/counters/{name}/void", json={"first": 4, "reason": "spoiled"})
    exported = (await client.get(f"/counters/{name}/audit")).json()
    rows = exported["rows"]
    issued = [(r["first"], r["last"]) for r in rows if r["status"] == "issued"]
    assert issued == [(1, 2), (3, 5)]
    assert [r["idempotency_key"] for r in rows if r["status"] == "issued"] == ["", "order-9"]
    assert all(r["who"] == "127.0.0.1" and r["row_hash"] for r in rows if r["status"] == "issued")
    assert [(r["first"], r["reason"]) for r in rows if r["status"] == "void"] == [(4, "spoiled")]
    text = (await client.get(f"/counters/{name}/audit", params={"format": "csv"})).text
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert [{k: str(v) for k, v in row.items()} for row in rows] == parsed, "CSV = JSON"


async def test_verify_names_the_first_row_an_update_by_sql_changed(
    client: httpx.AsyncClient, name: str, database_url: str
) -> None:
    await client.post("/counters", json={"name": name})
    for _ in range(4):
        await take(client, name)
    await client.post(f"/counters/{name}/void", json={"first": 2, "reason": "cancelled"})
    sound = await client.get("/audit/verify", params={"counter": name})
    assert sound.status_code == 200 and sound.json()["ok"], sound.text
    assert sound.json()["rows"] >= 5
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT id FROM allocation_frames WHERE counters @> ARRAY[%s] ORDER BY id", (name,)
        )
        ids = [row[0] for row in await cur.fetchall()]
        # Someone moves the second frame's range, to hide a value:
        await conn.execute(
            "UPDATE allocation_frames SET ranges = replace(ranges::text, '2, 2', '3, 3')::json"
            " WHERE id = %s",
            (ids[1],),
        )
        changed = await client.get("/audit/verify", params={"counter": name})
        body = problem_free(changed)
        assert changed.status_code == 409 and body["first_bad"]["row"] == ids[1], body
        assert "does not match its hash" in body["first_bad"]["why"]
        # ... or deletes a row outright:
        await conn.execute("DELETE FROM allocation_frames WHERE id = %s", (ids[1],))
        gone = problem_free(await client.get("/audit/verify", params={"counter": name}))
        assert gone["first_bad"]["row"] == ids[2] and "does not follow" in gone["first_bad"]["why"]


def problem_free(response: httpx.Response) -> dict[str, object]:
    body: dict[str, object] = response.json()
    return body


async def test_retention_is_chosen_at_creation_and_changed_by_admin(
    client: httpx.AsyncClient, name: str, database_url: str
) -> None:
    made = await client.post("/counters", json={"name": name, "retention_days": 3650})
    assert made.json()["retention_days"] == 3650
    await take(client, name)
    changed = await client.patch(f"/counters/{name}", json={"retention_days": 1})
    assert changed.status_code == 200 and changed.json()["retention_days"] == 1
    problem(
        await client.patch(f"/counters/{name}", json={"retention_days": 0}), 422, "invalid-request"
    )
    problem(await client.patch(f"/counters/{name}", json={"start": 5}), 422, "invalid-request")
    problem(
        await client.patch("/counters/nope", json={"retention_days": 2}), 404, "counter-not-found"
    )
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT keep_until - committed_at FROM allocation_frames WHERE counters @> ARRAY[%s]",
            (name,),
        )
        (kept,) = await cur.fetchone()  # type: ignore[misc]
    assert kept >= timedelta(days=3650), "a row is kept its counter's retention, at least"


async def test_a_pruned_span_is_named_not_counted_as_a_gap(
    settings: Settings, database_url: str, name: str
) -> None:
    quick = settings.but(audit_retention_s=1.0)
    async with EmbeddedStack(quick) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name})
        await take(client, name, 3)
        store = PostgresStore(database_url)
        try:
            await store.prune(datetime.now(UTC) + timedelta(seconds=5), 1.0, 3600)
        finally:
            await store.close()
        await take(client, name, 2)
        report = (await client.get(f"/counters/{name}/report")).json()
    assert report["trail"]["pruned"] == [1, 3]
    assert report["unexplained_gaps"] == 0 and report["issued"] == 5


@pytest.mark.parametrize(
    "body",
    [
        {"reason": "x"},
        {"values": [], "reason": "x"},
        {"values": [1.5], "reason": "x"},
        {"values": [1], "first": 1, "reason": "x"},
        {"values": [1], "last": 3, "reason": "x"},
        {"values": [1], "first": None, "reason": "x"},
        {"first": 3, "last": 1, "reason": "x"},
        {"first": 1},
        {"first": 1, "reason": ""},
        {"first": 1, "reason": "a\nb"},
        {"first": 1, "reason": "x", "period": "last year"},
        {"first": 1, "reason": "x", "colour": "red"},
    ],
)
async def test_a_malformed_void_is_422(client: httpx.AsyncClient, name: str, body: object) -> None:
    await client.post("/counters", json={"name": name})
    await take(client, name, 3)
    problem(await client.post(f"/counters/{name}/void", json=body), 422, "invalid-request")


async def test_the_ledger_on_the_aws_path_with_front_frames(
    aws: tuple[Settings, object], name: str
) -> None:
    """Kinesis, DynamoDB and a separate batcher: front frames put one record for many
    requests, and the trail says who took each run of them; a void travels the same way."""
    from numerator.stack import BatcherStack, EdgeStack

    settings, _ = aws
    async with (
        BatcherStack(settings),
        EdgeStack(settings) as edge,
        asgi_client(edge.app(), client=("127.0.0.1", 1)) as client,
    ):
        assert (await client.post("/counters", json={"name": name})).status_code == 201
        await asyncio.gather(*(take(client, name) for _ in range(40)))
        voided = await client.post(
            f"/counters/{name}/void", json={"values": [5, 6, 40], "reason": "spoiled"}
        )
        assert voided.status_code == 200, voided.text
        report = (await client.get(f"/counters/{name}/report")).json()
        rows = (await client.get(f"/counters/{name}/audit")).json()["rows"]
        sound = await client.get("/audit/verify", params={"counter": name})
    assert report["issued"] == 40 and report["unexplained_gaps"] == 0 and report["rising"]
    assert report["voided"] == {"spoiled": 3}
    issued = [r for r in rows if r["status"] == "issued"]
    assert sum(r["last"] - r["first"] + 1 for r in issued) == 40
    assert len(issued) < 40, "runs of one requester are one line, not one per request"
    assert all("127.0.0.1" in r["who"] for r in issued), issued
    assert sound.status_code == 200 and sound.json()["ok"], sound.text


async def test_confirmation_and_its_expiry(settings: Settings, name: str) -> None:
    """A counter that needs confirmation: confirmed values are final; one void is refused a
    confirmation; one neither confirmed nor void within CONFIRM_TTL_S is voided not-confirmed."""
    quick = settings.but(confirm_ttl_s=1.0)
    async with EmbeddedStack(quick) as stack, asgi_client(stack.app()) as client:
        made = await client.post("/counters", json={"name": name, "confirm": "required"})
        assert made.json()["confirm"] == "required"
        await take(client, name, 4)
        done = await client.post(f"/counters/{name}/confirm", json={"values": [1, 2]})
        assert done.status_code == 200 and done.json()["confirmed"] == [{"first": 1, "last": 2}]
        again = await client.post(f"/counters/{name}/confirm", json={"values": [1, 2]})
        assert again.json() == done.json(), "idempotent"
        await client.post(f"/counters/{name}/void", json={"first": 3, "reason": "spoiled"})
        refused = await client.post(f"/counters/{name}/confirm", json={"first": 3})
        problem(refused, 409, "value-already-void")
        problem(
            await client.post(f"/counters/{name}/confirm", json={"first": 9}),
            409,
            "value-not-issued",
        )
        early = (await client.get(f"/counters/{name}/report")).json()
        assert (early["confirmed"], early["awaiting_confirmation"]) == (2, 1)

        async def expired() -> bool:
            found = (await client.get(f"/counters/{name}/report")).json()
            return found["voided"].get("not-confirmed") == 1

        await until(expired, within=10)
        late = (await client.get(f"/counters/{name}/report")).json()
        plain = f"{name}-plain"
        await client.post("/counters", json={"name": plain})
        await take(client, plain)
        other = await client.post(f"/counters/{plain}/confirm", json={"first": 1})
    assert late["awaiting_confirmation"] == 0 and late["unexplained_gaps"] == 0
    assert [(v["first"], v["reason"]) for v in late["voids"]] == [
        (3, "spoiled"),
        (4, "not-confirmed"),
    ]
    problem(other, 409, "confirm-not-required")


async def test_values_of_an_edge_that_died_are_listed_as_unsure(
    client: httpx.AsyncClient, stack: EmbeddedStack, name: str, database_url: str, monkeypatch: Any
) -> None:
    """Values issued to requests of an edge that died (no clean stop, silent for EDGE_DEAD_S)
    after it last said all its requests were answered may not have reached their clients: the
    report lists them as unsure, with their requests, and the export marks them; a value voided
    after is void, not unsure."""
    assert (await client.post("/counters", json={"name": name})).status_code == 201
    await take(client, name, 2)  # this process's edge: alive
    dead, live = f"dead{name[2:]}", wire.edge_id()
    monkeypatch.setattr(wire, "_PREFIX", dead)  # the requests below come through `dead`
    await take(client, name, 2)  # 3-4: answered before `dead` last said all were answered
    await asyncio.sleep(SKEW_S + 0.2)
    await stack.store.edge_seen(dead, time.time())
    await take(client, name, 3)
    keyed = await client.post(f"/counters/{name}/next", headers={"Idempotency-Key": "inv-7"})
    assert keyed.json()["value"] == 8
    report = (await client.get(f"/counters/{name}/report")).json()
    assert report["unsure"] == 0, "an edge seen within EDGE_DEAD_S is alive"

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as sql:
        await sql.execute(
            "UPDATE edges SET seen_at = now() - make_interval(secs => %s) WHERE id = %s",
            (EDGE_DEAD_S + 1, dead),
        )
    report = (await client.get(f"/counters/{name}/report")).json()
    assert report["unsure"] == 4 and report["delivered"] == 4, report
    runs = [(r["first"], r["last"], r["idempotency_key"], r["edge"]) for r in report["unsure_runs"]]
    assert runs == [(5, 7, "", dead), (8, 8, "inv-7", dead)]
    assert report["unexplained_gaps"] == 0

    await client.post(f"/counters/{name}/void", json={"first": 6, "reason": "spoiled"})
    report = (await client.get(f"/counters/{name}/report")).json()
    assert report["unsure"] == 3 and report["delivered"] == 4, "a void is void, not unsure"
    rows = (await client.get(f"/counters/{name}/audit")).json()["rows"]
    marked = [(r["first"], r["last"]) for r in rows if r["delivery"] == "unsure"]
    assert marked == [(5, 7), (8, 8)]
    assert {r["edge"] for r in rows if r["status"] == "issued"} == {live, dead}


async def test_an_edge_that_stops_cleanly_leaves_nothing_unsure(
    stack: EmbeddedStack, database_url: str, monkeypatch: Any
) -> None:
    me = f"clean{uuid.uuid4().hex[:11]}"
    monkeypatch.setattr(wire, "_PREFIX", me)
    async with stack.edge.living():
        await until(lambda: seen(database_url, me), within=5)
        assert await seen(database_url, me) == (True, False)
    assert await seen(database_url, me) == (True, True), "a clean stop is written"
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as sql:
        await sql.execute("UPDATE edges SET seen_at = now() - interval '1 h' WHERE id = %s", (me,))
    assert await stack.store.dead_edges([me], EDGE_DEAD_S) == {}


async def seen(database_url: str, edge: str) -> tuple[bool, bool] | None:
    """Whether `edge` has a row, and whether it says the edge stopped cleanly."""
    async with await psycopg.AsyncConnection.connect(database_url) as sql:
        cursor = await sql.execute("SELECT ended_at IS NOT NULL FROM edges WHERE id = %s", (edge,))
        row = await cursor.fetchone()
    return (True, bool(row[0])) if row else None


@pytest.mark.parametrize(
    ("reset", "period", "form"),
    [
        ("yearly", "2026-12", "YYYY"),
        ("monthly", "2026", "YYYY-MM"),
        ("daily", "2026-02-30", "YYYY-MM-DD"),
        ("never", "2026", "''"),
    ],
)
async def test_a_report_for_a_period_the_counter_cannot_hold_is_422(
    client: httpx.AsyncClient, name: str, reset: str, period: str, form: str
) -> None:
    """Not "no values yet, unexplained 0": a period of another form is refused, naming the
    counter's reset and the form its periods take (issue 29)."""
    await client.post("/counters", json={"name": name, "reset": reset})
    await take(client, name, 3)
    refused = await client.get(f"/counters/{name}/report", params={"period": period})
    detail = problem(refused, 422, "invalid-request")["detail"]
    assert f"resets {reset}" in detail and form in detail, detail
    voided = await client.post(
        f"/counters/{name}/void", json={"first": 1, "reason": "x", "period": period}
    )
    problem(voided, 422, "invalid-request")
    found = await client.get(f"/counters/{name}/report")  # the current period: its own form
    assert found.status_code == 200 and found.json()["issued"] == 3, found.text


KINDS: dict[str, Any] = {
    "counter": str,
    "period": str,
    "first": int,
    "last": int,
    "size": int,
    "who": str,
    "key": (str, type(None)),
    "edge": str,
    "reason": str,
}


def documented_row() -> dict[str, list[str]]:
    """docs/invoices.md's "What an audit row holds": each field and the names of its entry's
    items (a run's, as `runs`)."""
    text = (ROOT / "docs" / "invoices.md").read_text()
    table = text.split("<!-- audit-row")[1].split("<!-- /audit-row -->")[0]
    found = {}
    for field, entry in re.findall(r"^\| `([\w.]+)` \| `\[([^\]]+)\]`", table, re.M):
        found[field] = [item.strip() for item in entry.split(",")]
    runs = re.search(r"each run `\[([^\]]+)\]`", table)
    assert runs is not None
    found["runs"] = [item.strip() for item in runs.group(1).split(",")]
    return found


def shaped(entry: list[Any], names: list[str]) -> bool:
    return len(entry) == len(names) and all(
        isinstance(item, KINDS[name]) and not isinstance(item, bool)
        for item, name in zip(entry, names, strict=True)
        if name in KINDS
    )


async def test_an_audit_row_holds_what_the_docs_say(
    settings: Settings, name: str, database_url: str
) -> None:
    """An auditor reads the hashed rows raw: every list in a real row (ranges, runs, voids,
    confirmations) has the items docs/invoices.md names, in its order (the edges' `detail.e`,
    in rows of another chain, is not made here)."""
    docs = documented_row()
    assert set(docs) >= {"ranges", "detail.r", "detail.v", "detail.c", "runs"}
    async with EmbeddedStack(settings) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": name, "confirm": "required"})
        await take(client, name, 2)
        keyed = await client.post(f"/counters/{name}/next", headers={"Idempotency-Key": "k-1"})
        assert keyed.status_code == 200, keyed.text
        void = {"first": 1, "reason": "spoiled"}
        assert (await client.post(f"/counters/{name}/void", json=void)).status_code == 200
        done = await client.post(f"/counters/{name}/confirm", json={"first": 2, "last": 3})
        assert done.status_code == 200, done.text
    async with await psycopg.AsyncConnection.connect(database_url) as sql:
        cursor = await sql.execute(
            "SELECT ranges, detail FROM allocation_frames WHERE counters @> ARRAY[%s]", (name,)
        )
        rows = await cursor.fetchall()
    seen: dict[str, list[list[Any]]] = {"ranges": [], "runs": []}
    for ranges, detail in rows:
        seen["ranges"] += ranges
        for field, entries in detail.items():
            seen.setdefault(f"detail.{field}", []).extend(entries)
        seen["runs"] += [run for group in detail.get("r", []) for run in group[2]]
    assert {"ranges", "detail.r", "detail.v", "detail.c", "runs"} <= {f for f in seen if seen[f]}
    assert set(seen) <= set(docs), f"undocumented: {set(seen) - set(docs)}"
    for field, entries in seen.items():
        names = docs[field]
        wrong = [entry for entry in entries if not shaped(entry, names)]
        assert not wrong, f"{field}: {wrong} are not {names}"
    assert any(run[2] == "k-1" for run in seen["runs"]) and any(r[2] is None for r in seen["runs"])


async def test_a_void_of_scattered_values_is_answered_within_one_reply_timeout(
    settings: Settings, name: str, monkeypatch: Any
) -> None:
    """Issue 51, item 9: each range of a scattered void waited in turn, from one start: with
    frames that take most of the reply timeout, the later ranges came back `expired` after the
    first was voided, and the answer took a timeout per range. Now the ranges are asked for
    together and answered within one reply timeout."""
    import batcher.applier

    real = batcher.applier.apply

    async def slow(entries: Any, store: Any, basis: Any) -> Any:
        if any(isinstance(e.record, wire.Void) for e in entries):
            await asyncio.sleep(0.5)  # a Postgres busy elsewhere: half the reply timeout a frame
        return await real(entries, store, basis)

    monkeypatch.setattr(batcher.applier, "apply", slow)
    async with (
        EmbeddedStack(settings.but(reply_timeout_s=1.0)) as stack,
        asgi_client(stack.app()) as client,
    ):
        await client.post("/counters", json={"name": name})
        await take(client, name, 6)
        began = time.monotonic()
        void = {"values": [1, 3, 5], "reason": "scattered"}
        made = await client.post(f"/counters/{name}/void", json=void)
        took = time.monotonic() - began
    assert made.status_code == 200, made.text
    assert made.json()["voided"] == [{"first": v, "last": v} for v in (1, 3, 5)]
    assert took < 1.0, f"{took:.2f} s: past the reply timeout"


async def test_a_refused_period_leaves_no_runs_in_its_frames_audit_row(
    settings: Settings, fresh_database: str
) -> None:
    """Issue 51, item 10: a plain frame's audit rows were built before the floor refused a
    period (its counter_values moved back by hand), so the hashed row named who 'took' values
    of a period that allocated none. One fixed frame holds a refused counter and a sound one."""
    refused, sound = f"r-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
    fixed = settings.but(database_url=fresh_database, frame_policy="fixed", back_frame_ms=300.0)
    async with EmbeddedStack(fixed) as stack, asgi_client(stack.app()) as client:
        for name in (refused, sound):
            await client.post("/counters", json={"name": name})
            await take(client, name, 5)
        async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as c:
            await c.execute(
                "UPDATE counter_values SET allocated = 2 WHERE counter = %s", (refused,)
            )
        no, yes = await asyncio.gather(
            client.post(f"/counters/{refused}/next"), client.post(f"/counters/{sound}/next")
        )
    assert no.status_code == 503 and yes.json()["value"] == 6, (no.text, yes.text)
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT ranges, detail FROM allocation_frames WHERE %s = ANY(counters)"
            " ORDER BY id DESC LIMIT 1",
            (sound,),
        )
        ranges, detail = await cur.fetchone()  # type: ignore[misc]
    assert [r[0] for r in ranges] == [sound]
    assert [r[0] for r in detail["r"]] == [sound], detail
