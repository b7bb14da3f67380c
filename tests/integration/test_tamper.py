"""Guarantee 5 against someone who edits the database (issue 29): each edit below is made by SQL
to a live trail (a service that handed out 30 values, voided some, and kept its heads), and each
is then caught: by `audit verify` (GET, or POST with heads anchored before the edit), naming the
table and row that disagree, or by the completeness report, naming it as a breach. Each test
first checks that the untouched trail is sound, so that a check that always fails cannot pass.

Every test has a database of its own: verify reads every chain, and the edits are for good."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest

from infra import wire
from infra.settings import Settings
from numerator.ledger import anchors
from numerator.stack import EmbeddedStack
from tests.asgi import asgi_client
from tests.checks import until
from tests.tamper import NAME, REHASH, Tampered, named, take

pytestmark = pytest.mark.slow  # 34 tests, each on a database of its own: the slow lane (CI runs it)

# The voids table against the chain.


async def test_a_voids_reason_changed(tampered: Tampered) -> None:
    await tampered.rows("UPDATE voids SET reason = 'typo' WHERE counter = %s AND first = 4", NAME)
    (hit,) = named(await tampered.verify(), "voids", f"{NAME}//4")
    assert "'typo'" in hit["why"] and "'spoiled'" in hit["why"]
    assert (await tampered.report())["voided"]["spoiled"] == 1, "the report reads the chain"


async def test_a_void_deleted(tampered: Tampered) -> None:
    await tampered.rows("DELETE FROM voids WHERE counter = %s AND first = 20", NAME)
    (hit,) = named(await tampered.verify(), "voids", f"{NAME}//20")
    assert "is missing" in hit["why"]


async def test_a_forged_abandoned_void_over_delivered_values(tampered: Tampered) -> None:
    await tampered.rows(
        "INSERT INTO voids (counter, period, first, last, reason, who, keep_until)"
        " VALUES (%s, '', 10, 12, 'abandoned', '', now() + interval '1 day')",
        NAME,
    )
    (hit,) = named(await tampered.verify(), "voids", f"{NAME}//10")
    assert "forged" in hit["why"]
    report = await tampered.report()
    assert "abandoned" not in report["voided"] and report["delivered"] == 30


# Confirmations.


async def test_a_forged_or_deleted_confirmation(tampered: Tampered) -> None:
    client = tampered.client
    await client.post("/counters", json={"name": "conf", "confirm": "required"})
    await take(client, 3, "conf")
    done = await client.post("/counters/conf/confirm", json={"values": [1]})
    assert done.status_code == 200, done.text
    assert (await tampered.verify())["ok"]
    await tampered.rows("DELETE FROM confirmations WHERE counter = 'conf'")
    await tampered.rows(
        "INSERT INTO confirmations (counter, period, first, last, who, keep_until)"
        " VALUES ('conf', '', 2, 3, 'me', now() + interval '1 day')"
    )
    hits = named(await tampered.verify(), "confirmations")
    assert {h["row"] for h in hits} == {"conf//1-1", "conf//2-3"}, hits
    report = (await client.get("/counters/conf/report")).json()
    assert report["confirmed"] == 1, "the report reads the chain"


# A counter's last value.


async def test_counter_values_moved_back(tampered: Tampered) -> None:
    await tampered.rows("UPDATE counter_values SET allocated = 20 WHERE counter = %s", NAME)
    (hit,) = named(await tampered.verify(), "counter_values", f"{NAME}/")
    assert "moved back" in hit["why"] and "up to 30" in hit["why"]
    report = await tampered.report()
    assert any("past the last value handed out (20)" in b for b in report["breaches"]), report
    refused = await tampered.client.post(f"/counters/{NAME}/next")
    assert refused.status_code == 503 and "audit" in refused.json()["detail"], refused.text


async def test_a_fresh_batcher_refuses_below_the_chain(
    tampered: Tampered, settings: Settings
) -> None:
    """The floor is read from the chain, not only remembered: a batcher started after the edit
    refuses too."""
    await tampered.rows("UPDATE counter_values SET allocated = 20 WHERE counter = %s", NAME)
    url = tampered.stack.settings.database.database_url
    async with (
        EmbeddedStack(settings.but(database_url=url)) as other,
        asgi_client(other.app()) as client,
    ):
        refused = await client.post(f"/counters/{NAME}/next")
    assert refused.status_code == 503, refused.text
    assert (await tampered.rows("SELECT allocated FROM counter_values"))[0][0] == 20


async def test_counter_values_moved_forward(tampered: Tampered) -> None:
    await tampered.rows("UPDATE counter_values SET allocated = 35 WHERE counter = %s", NAME)
    (hit,) = named(await tampered.verify(), "counter_values", f"{NAME}/")
    assert "only up to 30" in hit["why"]
    assert (await tampered.report())["unexplained_gaps"] == 5


# Rows added, removed, moved.

FORGE = (
    "INSERT INTO allocation_frames (stream, shard, sequence, chain, ranges, detail, counters,"
    " committed_at, keep_until, prev, hash) SELECT h.stream, h.shard, '999', h.chain,"
    " %s::json, NULL, ARRAY[%s], now(), h.keep_until, h.hash, sha256(h.hash ||"
    " ledger_content(h.stream, h.shard, '999', %s::json, NULL, now(), h.keep_until))"
    " FROM (SELECT * FROM allocation_frames WHERE chain = %s ORDER BY id DESC LIMIT 1) AS h"
)


async def test_rows_appended_with_consistent_hashes(tampered: Tampered) -> None:
    chain, _ = await tampered.chain()
    forged = f'[["{NAME}", "", 31, 40]]'
    await tampered.rows(FORGE, forged, NAME, forged, chain)
    report = await tampered.report()
    assert report["past_last"] and report["past_last"][0]["last"] == 40
    assert any("past the last value handed out (30)" in b for b in report["breaches"])
    (hit,) = named(await tampered.verify(), "counter_values", f"{NAME}/")
    assert "up to 40" in hit["why"]


async def test_a_chains_last_row_deleted(tampered: Tampered) -> None:
    chain, ids = await tampered.chain()
    await tampered.rows("DELETE FROM allocation_frames WHERE id = %s", ids[-1])
    found = await tampered.verify(anchored=True)
    (hit,) = named(found, "allocation_frames", ids[-1])
    assert "anchored head" in hit["why"] and hit["chain"] == chain
    named(found, "voids")  # the last row held the void of 20-21


async def test_the_last_rows_truncated_and_the_tables_made_to_match(tampered: Tampered) -> None:
    """Cut the chain's last rows and make voids and counter_values agree: only the anchor shows."""
    _chain, ids = await tampered.chain()
    await tampered.rows("DELETE FROM allocation_frames WHERE id >= %s", ids[-4])
    await tampered.rows("DELETE FROM voids")
    await tampered.rows(
        "UPDATE counter_values SET allocated = (SELECT max((r->>3)::bigint)"
        " FROM allocation_frames, json_array_elements(ranges) AS r)"
    )
    found = await tampered.verify()
    assert found["ok"], f"consistent in itself: only an anchor can tell {found}"
    (hit,) = named(await tampered.verify(anchored=True), "allocation_frames", ids[-1])
    assert "truncated" in hit["why"]


async def test_a_chains_first_row_deleted(tampered: Tampered) -> None:
    _chain, ids = await tampered.chain()
    await tampered.rows("DELETE FROM allocation_frames WHERE id = %s", ids[0])
    (hit,) = named(await tampered.verify(), "allocation_frames", ids[1])
    assert "first row but follows a row the trail does not hold" in hit["why"]
    assert (await tampered.report())["unexplained_gaps"] == 1


async def test_a_chains_first_row_deleted_and_the_chain_rehashed(tampered: Tampered) -> None:
    chain, ids = await tampered.chain()
    await tampered.rows("DELETE FROM allocation_frames WHERE id = %s", ids[0])
    await tampered.rows(REHASH.format(first=ids[1], chain=chain, genesis="true"))
    assert (await tampered.report())["breaches"] == ["values 1 to 1: no audit row holds them"]
    (hit,) = named(
        await tampered.verify(anchored=True), "allocation_frames", tampered.heads[chain]["row"]
    )
    assert "rewritten" in hit["why"]


async def test_a_middle_row_deleted(tampered: Tampered) -> None:
    _, ids = await tampered.chain()
    await tampered.rows("DELETE FROM allocation_frames WHERE id = %s", ids[3])
    (hit,) = named(await tampered.verify(), "allocation_frames", ids[4])
    assert "does not follow" in hit["why"]


async def test_a_row_forged_in_the_middle(tampered: Tampered) -> None:
    _chain, ids = await tampered.chain()
    hole = ids[4] + 1
    assert hole not in ids
    await tampered.rows(
        "INSERT INTO allocation_frames (id, stream, shard, sequence, chain, ranges, detail,"
        " counters, committed_at, keep_until, prev, hash) SELECT %s, stream, shard, sequence,"
        " chain, ranges, detail, counters, committed_at, keep_until, hash, sha256(hash ||"
        " ledger_content(stream, shard, sequence, ranges, detail, committed_at, keep_until))"
        " FROM allocation_frames WHERE id = %s",
        hole,
        ids[4],
    )
    found = await tampered.verify()
    (hit,) = named(found, "allocation_frames", ids[5])
    assert "does not follow" in hit["why"]
    assert (await tampered.report())["issued_twice"] == [[5, 5]]


async def test_a_row_rewritten_and_the_rest_rehashed(tampered: Tampered) -> None:
    chain, ids = await tampered.chain()
    await tampered.rows(
        "UPDATE allocation_frames SET detail = replace(detail::text, '127.0.0.1', 'someone')::json"
        " WHERE id = %s",
        ids[2],
    )
    await tampered.rows(REHASH.format(first=ids[2], chain=chain, genesis="false"))
    assert (await tampered.verify())["ok"], "consistent in itself: only an anchor can tell"
    (hit,) = named(
        await tampered.verify(anchored=True), "allocation_frames", tampered.heads[chain]["row"]
    )
    assert "rewritten" in hit["why"]


async def test_a_rows_counters_edited(tampered: Tampered) -> None:
    _, ids = await tampered.chain()
    await tampered.rows("UPDATE allocation_frames SET counters = '{}' WHERE id = %s", ids[2])
    (hit,) = named(await tampered.verify(), "allocation_frames", ids[2])
    assert "counters column" in hit["why"]


async def test_a_row_moved_to_a_new_chain_of_its_shard(tampered: Tampered) -> None:
    chain, ids = await tampered.chain()
    stream_shard = chain.rsplit("/", 1)[0]
    await tampered.rows(
        "UPDATE allocation_frames SET chain = %s WHERE id = %s", f"{stream_shard}/other", ids[2]
    )
    found = await tampered.verify()
    (moved,) = named(found, "allocation_frames", ids[2])  # a first row that follows nothing kept
    assert moved["chain"] == f"{stream_shard}/other"
    named(found, "allocation_frames", ids[3])  # its old chain skips it


async def test_a_row_moved_to_another_shards_chain(tampered: Tampered) -> None:
    _, ids = await tampered.chain()
    with pytest.raises(psycopg.errors.CheckViolation):
        await tampered.rows("UPDATE allocation_frames SET chain = 'x/y/z' WHERE id = %s", ids[3])
    # and by someone who drops the constraint first:
    await tampered.rows(
        "ALTER TABLE allocation_frames DROP CONSTRAINT allocation_frames_chain_named"
    )
    await tampered.rows("UPDATE allocation_frames SET chain = 'x/y/z' WHERE id = %s", ids[3])
    (hit,) = named(await tampered.verify(), "allocation_frames", ids[3])
    assert "not named by its stream and shard" in hit["why"]


async def test_a_rows_chain_set_null_is_refused_by_the_schema(tampered: Tampered) -> None:
    _, ids = await tampered.chain()
    with pytest.raises(psycopg.errors.NotNullViolation):
        await tampered.rows("UPDATE allocation_frames SET chain = NULL WHERE id = %s", ids[3])
    with pytest.raises(psycopg.errors.NotNullViolation):
        await tampered.rows("UPDATE allocation_frames SET hash = NULL WHERE id = %s", ids[3])


# Edits the chains always caught: a range, who, the commit time, two rows swapped.


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE allocation_frames SET ranges = replace(ranges::text, '3, 3', '2, 2')::json"
        " WHERE id = {row}",
        "UPDATE allocation_frames SET detail = replace(detail::text, '127.0.0.1', 'x')::json"
        " WHERE id = {row}",
        "UPDATE allocation_frames SET committed_at = committed_at - interval '1 s'"
        " WHERE id = {row}",
        "UPDATE allocation_frames SET keep_until = keep_until - interval '1 day' WHERE id = {row}",
    ],
    ids=["range", "who", "committed_at", "keep_until"],
)
async def test_a_rows_content_edited(tampered: Tampered, edit: str) -> None:
    _, ids = await tampered.chain()
    await tampered.rows(edit.format(row=ids[2]))
    (hit,) = named(await tampered.verify(), "allocation_frames", ids[2])
    assert "does not match its hash" in hit["why"]


async def test_two_rows_swapped(tampered: Tampered) -> None:
    _, ids = await tampered.chain()
    a, b = ids[1], ids[2]
    await tampered.rows(
        "UPDATE allocation_frames f SET ranges = g.ranges, detail = g.detail"
        " FROM allocation_frames g WHERE (f.id, g.id) IN ((%s, %s), (%s, %s))",
        a,
        b,
        b,
        a,
    )
    found = await tampered.verify()
    assert {h["row"] for h in named(found, "allocation_frames")} >= {a, b}


# The ends of edges, which decide `unsure`.


async def dead_and_clean_edges(
    tampered: Tampered, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str]:
    """An edge that died holding values 31-33 and one that stopped cleanly after taking 34,
    each end chained by the batcher."""
    dead, clean = f"dead{uuid.uuid4().hex[:12]}", f"clean{uuid.uuid4().hex[:11]}"
    store = tampered.stack.store
    await store.edge_seen(dead, time.time() - 10)
    await store.edge_seen(clean, time.time() - 10)
    monkeypatch.setattr(wire, "_PREFIX", dead)
    await take(tampered.client, 3)
    monkeypatch.setattr(wire, "_PREFIX", clean)
    await take(tampered.client)
    monkeypatch.undo()
    await store.edge_seen(clean, time.time(), ended=True)
    await tampered.rows("UPDATE edges SET seen_at = now() - interval '1 min' WHERE id = %s", dead)

    async def marked() -> bool:
        rows = await tampered.rows(
            "SELECT count(*) FROM edges WHERE marked IS NOT NULL AND id IN (%s, %s)", dead, clean
        )
        return bool(rows[0][0] == 2)

    await until(marked, within=10)
    report = await tampered.report()
    assert report["unsure"] == 3 and {r["edge"] for r in report["unsure_runs"]} == {dead}
    assert (await tampered.verify())["ok"]
    return dead, clean


async def test_an_edges_end_set_to_hide_its_unsure_values(
    tampered: Tampered, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead, _ = await dead_and_clean_edges(tampered, monkeypatch)
    await tampered.rows("UPDATE edges SET ended_at = now() WHERE id = %s", dead)
    (hit,) = named(await tampered.verify(), "edges", dead)
    assert "marked it dead" in hit["why"]
    assert (await tampered.report())["unsure"] == 3, "the report reads the chained end"


async def test_an_edges_end_cleared_to_inflate_unsure_values(
    tampered: Tampered, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, clean = await dead_and_clean_edges(tampered, monkeypatch)
    await tampered.rows(
        "UPDATE edges SET ended_at = NULL, seen_at = now() - interval '1 h' WHERE id = %s", clean
    )
    (hit,) = named(await tampered.verify(), "edges", clean)
    assert "marked it ended" in hit["why"]
    assert (await tampered.report())["unsure"] == 3, "still only the dead edge's"


async def test_an_edges_settled_mark_moved(
    tampered: Tampered, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead, _ = await dead_and_clean_edges(tampered, monkeypatch)
    await tampered.rows("UPDATE edges SET settled_at = now() WHERE id = %s", dead)
    named(await tampered.verify(), "edges", dead)
    assert (await tampered.report())["unsure"] == 3


# Anchors: kept by the batcher outside Postgres, and pruned past.


async def test_the_batcher_keeps_heads_in_a_file_and_verify_holds_the_trail_to_them(
    settings: Settings, fresh_database: str, tmp_path: Path
) -> None:
    sink = tmp_path / "heads.jsonl"
    quick = settings.but(database_url=fresh_database, anchor_to=str(sink), anchor_every_s=0.2)
    async with EmbeddedStack(quick) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": NAME})
        for _ in range(3):
            await take(client)
        head = (await client.get("/audit/heads")).json()["heads"]

        def kept() -> bool:
            return sink.exists() and any(
                [(a["chain"], a["row"], a["hash"]) for a in anchors(line)]
                == [(c, h["row"], h["hash"]) for c, h in sorted(head.items())]
                for line in sink.read_text().splitlines()
            )

        await until(kept, within=10)
        held = await client.post("/audit/verify", json={"heads": anchors(sink.read_text())})
        assert held.status_code == 200, held.text
        async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as sql:
            await sql.execute(
                "DELETE FROM allocation_frames WHERE id = (SELECT max(id) FROM"
                " allocation_frames WHERE counters @> ARRAY[%s])",
                (NAME,),
            )
        broken = await client.post("/audit/verify", json={"heads": anchors(sink.read_text())})
    assert broken.status_code == 409
    assert any("anchored head" in b["why"] for b in broken.json()["breaches"]), broken.text


async def test_an_anchor_pruned_past_is_reported_as_pruned(
    settings: Settings, fresh_database: str
) -> None:
    from datetime import UTC, datetime, timedelta

    quick = settings.but(database_url=fresh_database, audit_retention_s=1.0)
    async with EmbeddedStack(quick) as stack, asgi_client(stack.app()) as client:
        await client.post("/counters", json={"name": NAME})
        for _ in range(3):
            await take(client)
        old = (await client.get("/audit/heads")).json()
        await stack.store.prune(datetime.now(UTC) + timedelta(seconds=5), 1.0, 3600)
        await take(client)
        found = await client.post("/audit/verify", json=old)
        assert found.status_code == 200, found.text
        assert found.json()["anchors"]["pruned"] == sorted(old["heads"])
        # the chain goes on from where retention left it
        await take(client)
        assert (await client.get("/audit/verify")).json()["ok"]
        report = (await client.get(f"/counters/{NAME}/report")).json()
    assert report["trail"]["pruned"] == [1, 3] and report["breaches"] == []


@pytest.mark.parametrize(
    "heads",
    [
        {},
        {"heads": {}},
        {"heads": {"a/b/c": {"row": "x", "hash": "0" * 64}}},
        {"heads": {"a/b/c": {"row": 1, "hash": "zz"}}},
    ],
)
async def test_malformed_heads_are_422(client: httpx.AsyncClient, heads: object) -> None:
    answer = await client.post("/audit/verify", json=heads)
    assert answer.status_code == 422, answer.text


async def test_edits_after_a_pause_are_still_caught(tampered: Tampered) -> None:
    """The batcher's own loops (marking edges, pruning) do not mend an edit away."""
    await tampered.rows(
        "UPDATE voids SET who = 'someone else' WHERE counter = %s AND first = 4", NAME
    )
    await asyncio.sleep(1.5)
    named(await tampered.verify(), "voids", f"{NAME}//4")
