"""The rewrite the anchors exist for (issue 51, items 1 and 2): a Postgres admin edits a middle
row of a chain and recomputes every hash after it. The batchers, reading their own sink back
before each anchoring, refuse to anchor the forged heads, and say so (the metric, a log line,
/healthz's alerts naming the chain and row); and `audit verify --heads` over the sink's whole
file names the rewrite even when a batcher without that check did anchor the forged head (every
anchored head is checked, not only each chain's newest)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from infra import trail
from infra.settings import Settings
from numerator.ledger import anchors, merged, parts, prunes
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client
from tests.checks import until
from tests.tamper import NAME, REHASH, take

pytestmark = pytest.mark.slow  # a database of its own, and a few anchoring rounds


async def verify_every_head(client: httpx.AsyncClient, sink: Path) -> dict[str, Any]:
    """What `numerator audit verify --heads sink` answers (numerator/ledger.py run_verify)."""
    given = anchors(text(sink))
    found = []
    for part in parts(given, prunes(text(sink))):
        answer = await client.post("/audit/verify", json=part)
        assert answer.status_code in (200, 409), answer.text
        found.append(answer.json())
    return merged(found, [b.to_json() for b in trail.conflicts(trail.anchors_of(given))])


def text(sink: Path) -> str:
    return sink.read_text()


def kept(sink: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in sink.read_text().splitlines()] if sink.exists() else []


async def test_a_rewrite_is_refused_by_the_batchers_and_named_by_every_head(
    settings: Settings, fresh_database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink = tmp_path / "heads.jsonl"
    quick = settings.but(database_url=fresh_database, anchor_to=str(sink), anchor_every_s=0.2)
    async with (
        EmbeddedStack(quick) as stack,
        await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as sql,
        asgi_client(stack.app()) as client,
    ):
        assert (await client.post("/counters", json={"name": NAME})).status_code == 201
        for _ in range(5):
            await take(client)
        true = (await client.get("/audit/heads")).json()["heads"]
        ((chain, head),) = true.items()
        await until(lambda: any(r["heads"] == true for r in kept(sink)), within=10)
        sound = await verify_every_head(client, sink)
        assert sound["ok"] and sound["anchors"]["held"] == [chain], sound

        cur = await sql.execute(
            "SELECT id FROM allocation_frames WHERE chain = %s ORDER BY id", (chain,)
        )
        ids = [r[0] for r in await cur.fetchall()]
        await sql.execute(
            "UPDATE allocation_frames SET detail = replace(detail::text, '127.0.0.1',"
            " 'someone')::json WHERE id = %s",
            (ids[2],),
        )
        await sql.execute(REHASH.format(first=ids[2], chain=chain, genesis="false").encode())
        assert (await client.get("/audit/verify")).json()["ok"], "consistent in itself"
        await take(client)  # ordinary traffic, then an anchoring round
        await until(lambda: stack.metrics.anchors_refused.value >= 2, within=10)

        health = await client.get("/healthz")
        assert health.status_code == 200, "values are still handed out"
        alert = health.json()["alerts"]["trail"]
        assert f"chain {chain} row {head['row']}" in alert and "rewritten" in alert, alert
        assert any(f"row {head['row']}" in r.getMessage() for r in caplog.records)
        assert [r for r in caplog.records if r.levelno == logging.ERROR]
        now = (await client.get("/audit/heads")).json()["heads"][chain]
        assert all(r["heads"][chain]["hash"] != now["hash"] for r in kept(sink)), (
            "the forged head was anchored"
        )
        assert max(r["heads"][chain]["row"] for r in kept(sink)) == head["row"]

        found = await verify_every_head(client, sink)
        assert not found["ok"] and found["anchors"]["held"] == []
        assert {(b["row"], b["chain"]) for b in found["breaches"]} == {(head["row"], chain)}

        # A batcher without the check (the issue's) anchors the forged head after the true
        # one: the newest head alone holds, every head does not.
        forged = {"at": "later", "by": "old-batcher", "heads": {chain: now}}
        with sink.open("ab") as out:
            out.write(orjson.dumps(forged) + b"\n")
        newest_only = {"heads": {chain: {"row": now["row"], "hash": now["hash"]}}}
        assert (await client.post("/audit/verify", json=newest_only)).json()["ok"]
        found = await verify_every_head(client, sink)
        assert not found["ok"]
        assert (head["row"], chain) in {(b["row"], b["chain"]) for b in found["breaches"]}


async def test_two_anchor_lines_that_disagree_on_a_row_are_named_both(
    settings: Settings, fresh_database: str, tmp_path: Path
) -> None:
    async with (
        EmbeddedStack(settings.but(database_url=fresh_database)) as stack,
        asgi_client(stack.app()) as client,
    ):
        await client.post("/counters", json={"name": NAME})
        await take(client)
        heads = (await client.get("/audit/heads")).json()["heads"]
        ((chain, head),) = heads.items()
        sink = tmp_path / "heads.jsonl"
        true = {"at": "t1", "by": "b1", "heads": heads}
        sink.write_bytes(orjson.dumps(true) + b"\n")
        assert (await verify_every_head(client, sink))["ok"]
        other = {**head, "hash": "0" * 64}
        lie = {"at": "t2", "by": "b2", "heads": {chain: other}}
        sink.write_bytes(orjson.dumps(lie) + b"\n" + orjson.dumps(true) + b"\n")
        found = await verify_every_head(client, sink)
    (both,) = [b for b in found["breaches"] if b["table"] == "anchors"]
    assert "t1 by b1" in both["why"] and "t2 by b2" in both["why"]
    assert both["row"] == head["row"] and both["chain"] == chain


async def rows_of(sql: psycopg.AsyncConnection[Any], counter: str) -> list[tuple[Any, ...]]:
    cur = await sql.execute(
        "SELECT id, chain, hash FROM allocation_frames WHERE counters @> ARRAY[%s] ORDER BY id",
        (counter,),
    )
    return await cur.fetchall()


async def test_a_prune_is_anchored_and_a_forged_one_is_named(
    settings: Settings, fresh_database: str, tmp_path: Path
) -> None:
    """A prune is an anchored event: retention's own is sound against the sink; rows deleted
    with `chain_starts` and `pruned` forged to match (the report then says "pruned", not
    "unexplained") are named by `audit verify --heads`: by the anchored prune they contradict,
    or, for a chain never pruned, by the anchored heads they cut off."""
    sink = tmp_path / "heads.jsonl"
    quick = settings.but(
        database_url=fresh_database, anchor_to=str(sink), anchor_every_s=0.2, audit_retention_s=1
    )
    async with (
        EmbeddedStack(quick) as stack,
        await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as sql,
        asgi_client(stack.app()) as client,
    ):
        await client.post("/counters", json={"name": NAME})
        await client.post("/counters", json={"name": "kept", "retention_days": 30})
        for counter in (NAME, NAME, NAME, "kept", "kept", "kept"):
            await take(client, 1, counter)
            now = (await client.get("/audit/heads")).json()["heads"]
            await until(lambda now=now: any(r["heads"] == now for r in kept(sink)), 10)
        await until(lambda: stack.batcher.prune.unanchored == {}, within=1)
        pruned = await stack.batcher.prune.once(datetime.now(UTC) + timedelta(seconds=2))
        assert pruned is not None and len(pruned["starts"]) == 1, pruned
        for _ in range(2):
            await take(client)
        found = await verify_every_head(client, sink)
        assert found["ok"], found["breaches"]
        ((chain, start),) = pruned["starts"].items()
        assert found["anchors"]["pruned"] == [chain]

        # Retention's start moved on by hand, over the first kept row (value 4).
        ((four, _, digest), _) = await rows_of(sql, NAME)
        await sql.execute("DELETE FROM allocation_frames WHERE id = %s", (four,))
        await sql.execute(
            "UPDATE chain_starts SET after_id = %s, after_hash = %s WHERE chain = %s",
            (four, digest, chain),
        )
        await sql.execute("UPDATE pruned SET upto = 4 WHERE counter = %s", (NAME,))
        report = (await client.get(f"/counters/{NAME}/report")).json()
        assert report["unexplained_gaps"] == 0, "the report takes the forged prune"
        assert (await client.get("/audit/verify")).json()["ok"], "consistent in itself"

        # A chain never pruned: its first rows deleted, a start and a prune forged.
        first, second, _ = await rows_of(sql, "kept")
        other = first[1]
        await sql.execute("DELETE FROM allocation_frames WHERE id <= %s", (second[0],))
        await sql.execute(
            "INSERT INTO chain_starts (chain, after_id, after_hash) VALUES (%s, %s, %s)",
            (other, second[0], second[2]),
        )
        await sql.execute("INSERT INTO pruned VALUES ('kept', '', 2)")
        assert (await client.get("/audit/verify")).json()["ok"], "consistent in itself"

        found = await verify_every_head(client, sink)
    hits = {b["row"]: b["why"] for b in found["breaches"] if b["table"] == "chain_starts"}
    assert sorted(hits) == sorted([chain, other]), found["breaches"]
    assert f"newest anchored prune says up to row {start['after_id']}" in hits[chain]
    assert "no anchored prune says so" in hits[other]
