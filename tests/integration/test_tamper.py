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
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from infra import wire
from infra.settings import Settings
from numerator.ledger import anchors
from numerator.stack import EmbeddedStack
from tests.checks import until

pytestmark = pytest.mark.slow  # 34 tests, each on a database of its own: the slow lane (CI runs it)

NAME = "inv"


@dataclass
class Trail:
    client: httpx.AsyncClient
    stack: EmbeddedStack
    sql: psycopg.AsyncConnection[tuple[Any, ...]]
    heads: dict[str, dict[str, Any]]
    """The heads as they were before any edit: what an anchor sink would hold."""

    async def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        cur = await self.sql.execute(sql.encode(), params)
        return await cur.fetchall() if cur.description else []

    async def chain(self) -> tuple[str, list[int]]:
        """The chain of the counter's rows, and its rows' ids in order."""
        found = await self.rows(
            "SELECT chain, id FROM allocation_frames WHERE counters @> ARRAY[%s] ORDER BY id",
            NAME,
        )
        return found[0][0], [row[1] for row in found]

    async def verify(self, anchored: bool = False) -> dict[str, Any]:
        if anchored:
            answer = await self.client.post("/audit/verify", json={"heads": self.heads})
        else:
            answer = await self.client.get("/audit/verify")
        assert answer.status_code in (200, 409), answer.text
        body: dict[str, Any] = answer.json()
        assert (answer.status_code == 200) is body["ok"] is (not body["breaches"])
        return body

    async def report(self) -> dict[str, Any]:
        answer = await self.client.get(f"/counters/{NAME}/report")
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body


async def take(client: httpx.AsyncClient, count: int = 1, name: str = NAME) -> httpx.Response:
    answer = await client.post(f"/counters/{name}/next", params={"count": count})
    assert answer.status_code == 200, answer.text
    return answer


async def void(client: httpx.AsyncClient, first: int, last: int, reason: str) -> None:
    body = {"first": first, "last": last, "reason": reason}
    answer = await client.post(f"/counters/{NAME}/void", json=body)
    assert answer.status_code == 200, answer.text


@pytest.fixture
async def trail(settings: Settings, fresh_database: str) -> AsyncIterator[Trail]:
    """Values 1-30 of `inv` in 20 frames, void 4 (spoiled) and 20-21 (cancelled), a hole in the
    row ids (for a row forged in the middle), heads kept; verify sound."""
    async with (
        EmbeddedStack(settings.but(database_url=fresh_database)) as stack,
        await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as sql,
    ):
        transport = httpx.ASGITransport(app=stack.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            assert (await client.post("/counters", json={"name": NAME})).status_code == 201
            for _ in range(5):
                await take(client)
            await sql.execute(
                "SELECT setval('allocation_frames_id_seq', nextval('allocation_frames_id_seq') + 5)"
            )
            for _ in range(5):
                await take(client)
            for _ in range(3):
                await take(client, 5)
            for _ in range(5):
                await take(client)
            await void(client, 4, 4, "spoiled")
            await void(client, 20, 21, "invoice cancelled: order 17 refunded")
            heads = (await client.get("/audit/heads")).json()["heads"]
            made = Trail(client, stack, sql, heads)
            sound = await made.verify(anchored=True)
            assert sound["ok"] and sound["anchors"]["held"] == sorted(heads), sound
            report = await made.report()
            assert report["issued"] == 30 and report["breaches"] == [], report
            yield made


def named(found: dict[str, Any], table: str, row: Any = None) -> list[dict[str, Any]]:
    """The breaches of `table` (and `row`) verify names; fails when there is none."""
    hits = [
        b for b in found["breaches"] if b["table"] == table and (row is None or b["row"] == row)
    ]
    assert not found["ok"] and hits, found["breaches"]
    return hits


# The voids table against the chain.


async def test_a_voids_reason_changed(trail: Trail) -> None:
    await trail.rows("UPDATE voids SET reason = 'typo' WHERE counter = %s AND first = 4", NAME)
    (hit,) = named(await trail.verify(), "voids", f"{NAME}//4")
    assert "'typo'" in hit["why"] and "'spoiled'" in hit["why"]
    assert (await trail.report())["voided"]["spoiled"] == 1, "the report reads the chain"


async def test_a_void_deleted(trail: Trail) -> None:
    await trail.rows("DELETE FROM voids WHERE counter = %s AND first = 20", NAME)
    (hit,) = named(await trail.verify(), "voids", f"{NAME}//20")
    assert "is missing" in hit["why"]


async def test_a_forged_abandoned_void_over_delivered_values(trail: Trail) -> None:
    await trail.rows(
        "INSERT INTO voids (counter, period, first, last, reason, who, keep_until)"
        " VALUES (%s, '', 10, 12, 'abandoned', '', now() + interval '1 day')",
        NAME,
    )
    (hit,) = named(await trail.verify(), "voids", f"{NAME}//10")
    assert "forged" in hit["why"]
    report = await trail.report()
    assert "abandoned" not in report["voided"] and report["delivered"] == 30


# Confirmations.


async def test_a_forged_or_deleted_confirmation(trail: Trail) -> None:
    client = trail.client
    await client.post("/counters", json={"name": "conf", "confirm": "required"})
    await take(client, 3, "conf")
    done = await client.post("/counters/conf/confirm", json={"values": [1]})
    assert done.status_code == 200, done.text
    assert (await trail.verify())["ok"]
    await trail.rows("DELETE FROM confirmations WHERE counter = 'conf'")
    await trail.rows(
        "INSERT INTO confirmations (counter, period, first, last, who, keep_until)"
        " VALUES ('conf', '', 2, 3, 'me', now() + interval '1 day')"
    )
    hits = named(await trail.verify(), "confirmations")
    assert {h["row"] for h in hits} == {"conf//1-1", "conf//2-3"}, hits
    report = (await client.get("/counters/conf/report")).json()
    assert report["confirmed"] == 1, "the report reads the chain"


# A counter's last value.


async def test_counter_values_moved_back(trail: Trail) -> None:
    await trail.rows("UPDATE counter_values SET allocated = 20 WHERE counter = %s", NAME)
    (hit,) = named(await trail.verify(), "counter_values", f"{NAME}/")
    assert "moved back" in hit["why"] and "up to 30" in hit["why"]
    report = await trail.report()
    assert any("past the last value handed out (20)" in b for b in report["breaches"]), report
    refused = await trail.client.post(f"/counters/{NAME}/next")
    assert refused.status_code == 503 and "audit" in refused.json()["detail"], refused.text


async def test_a_fresh_batcher_refuses_below_the_chain(trail: Trail, settings: Settings) -> None:
    """The floor is read from the chain, not only remembered: a batcher started after the edit
    refuses too."""
    await trail.rows("UPDATE counter_values SET allocated = 20 WHERE counter = %s", NAME)
    url = trail.stack.settings.database.database_url
    async with EmbeddedStack(settings.but(database_url=url)) as other:
        transport = httpx.ASGITransport(app=other.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            refused = await client.post(f"/counters/{NAME}/next")
    assert refused.status_code == 503, refused.text
    assert (await trail.rows("SELECT allocated FROM counter_values"))[0][0] == 20


async def test_counter_values_moved_forward(trail: Trail) -> None:
    await trail.rows("UPDATE counter_values SET allocated = 35 WHERE counter = %s", NAME)
    (hit,) = named(await trail.verify(), "counter_values", f"{NAME}/")
    assert "only up to 30" in hit["why"]
    assert (await trail.report())["unexplained_gaps"] == 5


# Rows added, removed, moved.

FORGE = (
    "INSERT INTO allocation_frames (stream, shard, sequence, chain, ranges, detail, counters,"
    " committed_at, keep_until, prev, hash) SELECT h.stream, h.shard, '999', h.chain,"
    " %s::json, NULL, ARRAY[%s], now(), h.keep_until, h.hash, sha256(h.hash ||"
    " ledger_content(h.stream, h.shard, '999', %s::json, NULL, now(), h.keep_until))"
    " FROM (SELECT * FROM allocation_frames WHERE chain = %s ORDER BY id DESC LIMIT 1) AS h"
)


async def test_rows_appended_with_consistent_hashes(trail: Trail) -> None:
    chain, _ = await trail.chain()
    forged = f'[["{NAME}", "", 31, 40]]'
    await trail.rows(FORGE, forged, NAME, forged, chain)
    report = await trail.report()
    assert report["past_last"] and report["past_last"][0]["last"] == 40
    assert any("past the last value handed out (30)" in b for b in report["breaches"])
    (hit,) = named(await trail.verify(), "counter_values", f"{NAME}/")
    assert "up to 40" in hit["why"]


async def test_a_chains_last_row_deleted(trail: Trail) -> None:
    chain, ids = await trail.chain()
    await trail.rows("DELETE FROM allocation_frames WHERE id = %s", ids[-1])
    found = await trail.verify(anchored=True)
    (hit,) = named(found, "allocation_frames", ids[-1])
    assert "anchored head" in hit["why"] and hit["chain"] == chain
    named(found, "voids")  # the last row held the void of 20-21


async def test_the_last_rows_truncated_and_the_tables_made_to_match(trail: Trail) -> None:
    """Cut the chain's last rows and make voids and counter_values agree: only the anchor shows."""
    _chain, ids = await trail.chain()
    await trail.rows("DELETE FROM allocation_frames WHERE id >= %s", ids[-4])
    await trail.rows("DELETE FROM voids")
    await trail.rows(
        "UPDATE counter_values SET allocated = (SELECT max((r->>3)::bigint)"
        " FROM allocation_frames, json_array_elements(ranges) AS r)"
    )
    found = await trail.verify()
    assert found["ok"], f"consistent in itself: only an anchor can tell {found}"
    (hit,) = named(await trail.verify(anchored=True), "allocation_frames", ids[-1])
    assert "truncated" in hit["why"]


async def test_a_chains_first_row_deleted(trail: Trail) -> None:
    _chain, ids = await trail.chain()
    await trail.rows("DELETE FROM allocation_frames WHERE id = %s", ids[0])
    (hit,) = named(await trail.verify(), "allocation_frames", ids[1])
    assert "first row but follows a row the trail does not hold" in hit["why"]
    assert (await trail.report())["unexplained_gaps"] == 1


REHASH = """DO $$
DECLARE r record; last bytea;
BEGIN
    last := coalesce((SELECT prev FROM allocation_frames WHERE id = {first}), '\\x'::bytea);
    IF {genesis} THEN last := '\\x'::bytea; END IF;
    FOR r IN SELECT id FROM allocation_frames WHERE chain = '{chain}' AND id >= {first}
             ORDER BY id LOOP
        UPDATE allocation_frames f SET prev = last, hash = sha256(last || ledger_content(
            f.stream, f.shard, f.sequence, f.ranges, f.detail, f.committed_at, f.keep_until))
        WHERE f.id = r.id RETURNING f.hash INTO last;
    END LOOP;
END $$"""


async def test_a_chains_first_row_deleted_and_the_chain_rehashed(trail: Trail) -> None:
    chain, ids = await trail.chain()
    await trail.rows("DELETE FROM allocation_frames WHERE id = %s", ids[0])
    await trail.rows(REHASH.format(first=ids[1], chain=chain, genesis="true"))
    assert (await trail.report())["breaches"] == ["values 1 to 1: no audit row holds them"]
    (hit,) = named(
        await trail.verify(anchored=True), "allocation_frames", trail.heads[chain]["row"]
    )
    assert "rewritten" in hit["why"]


async def test_a_middle_row_deleted(trail: Trail) -> None:
    _, ids = await trail.chain()
    await trail.rows("DELETE FROM allocation_frames WHERE id = %s", ids[3])
    (hit,) = named(await trail.verify(), "allocation_frames", ids[4])
    assert "does not follow" in hit["why"]


async def test_a_row_forged_in_the_middle(trail: Trail) -> None:
    _chain, ids = await trail.chain()
    hole = ids[4] + 1
    assert hole not in ids
    await trail.rows(
        "INSERT INTO allocation_frames (id, stream, shard, sequence, chain, ranges, detail,"
        " counters, committed_at, keep_until, prev, hash) SELECT %s, stream, shard, sequence,"
        " chain, ranges, detail, counters, committed_at, keep_until, hash, sha256(hash ||"
        " ledger_content(stream, shard, sequence, ranges, detail, committed_at, keep_until))"
        " FROM allocation_frames WHERE id = %s",
        hole,
        ids[4],
    )
    found = await trail.verify()
    (hit,) = named(found, "allocation_frames", ids[5])
    assert "does not follow" in hit["why"]
    assert (await trail.report())["issued_twice"] == [[5, 5]]


async def test_a_row_rewritten_and_the_rest_rehashed(trail: Trail) -> None:
    chain, ids = await trail.chain()
    await trail.rows(
        "UPDATE allocation_frames SET detail = replace(detail::text, '127.0.0.1', 'someone')::json"
        " WHERE id = %s",
        ids[2],
    )
    await trail.rows(REHASH.format(first=ids[2], chain=chain, genesis="false"))
    assert (await trail.verify())["ok"], "consistent in itself: only an anchor can tell"
    (hit,) = named(
        await trail.verify(anchored=True), "allocation_frames", trail.heads[chain]["row"]
    )
    assert "rewritten" in hit["why"]


async def test_a_rows_counters_edited(trail: Trail) -> None:
    _, ids = await trail.chain()
    await trail.rows("UPDATE allocation_frames SET counters = '{}' WHERE id = %s", ids[2])
    (hit,) = named(await trail.verify(), "allocation_frames", ids[2])
    assert "counters column" in hit["why"]


async def test_a_row_moved_to_a_new_chain_of_its_shard(trail: Trail) -> None:
    chain, ids = await trail.chain()
    stream_shard = chain.rsplit("/", 1)[0]
    await trail.rows(
        "UPDATE allocation_frames SET chain = %s WHERE id = %s", f"{stream_shard}/other", ids[2]
    )
    found = await trail.verify()
    (moved,) = named(found, "allocation_frames", ids[2])  # a first row that follows nothing kept
    assert moved["chain"] == f"{stream_shard}/other"
    named(found, "allocation_frames", ids[3])  # its old chain skips it


async def test_a_row_moved_to_another_shards_chain(trail: Trail) -> None:
    _, ids = await trail.chain()
    with pytest.raises(psycopg.errors.CheckViolation):
        await trail.rows("UPDATE allocation_frames SET chain = 'x/y/z' WHERE id = %s", ids[3])
    # and by someone who drops the constraint first:
    await trail.rows("ALTER TABLE allocation_frames DROP CONSTRAINT allocation_frames_chain_named")
    await trail.rows("UPDATE allocation_frames SET chain = 'x/y/z' WHERE id = %s", ids[3])
    (hit,) = named(await trail.verify(), "allocation_frames", ids[3])
    assert "not named by its stream and shard" in hit["why"]


async def test_a_rows_chain_set_null_is_refused_by_the_schema(trail: Trail) -> None:
    _, ids = await trail.chain()
    with pytest.raises(psycopg.errors.NotNullViolation):
        await trail.rows("UPDATE allocation_frames SET chain = NULL WHERE id = %s", ids[3])
    with pytest.raises(psycopg.errors.NotNullViolation):
        await trail.rows("UPDATE allocation_frames SET hash = NULL WHERE id = %s", ids[3])


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
async def test_a_rows_content_edited(trail: Trail, edit: str) -> None:
    _, ids = await trail.chain()
    await trail.rows(edit.format(row=ids[2]))
    (hit,) = named(await trail.verify(), "allocation_frames", ids[2])
    assert "does not match its hash" in hit["why"]


async def test_two_rows_swapped(trail: Trail) -> None:
    _, ids = await trail.chain()
    a, b = ids[1], ids[2]
    await trail.rows(
        "UPDATE allocation_frames f SET ranges = g.ranges, detail = g.detail"
        " FROM allocation_frames g WHERE (f.id, g.id) IN ((%s, %s), (%s, %s))",
        a,
        b,
        b,
        a,
    )
    found = await trail.verify()
    assert {h["row"] for h in named(found, "allocation_frames")} >= {a, b}


# The ends of edges, which decide `unsure`.


async def dead_and_clean_edges(trail: Trail, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """An edge that died holding values 31-33 and one that stopped cleanly after taking 34,
    each end chained by the batcher."""
    dead, clean = f"dead{uuid.uuid4().hex[:12]}", f"clean{uuid.uuid4().hex[:11]}"
    store = trail.stack.store
    await store.edge_seen(dead, time.time() - 10)
    await store.edge_seen(clean, time.time() - 10)
    monkeypatch.setattr(wire, "_PREFIX", dead)
    await take(trail.client, 3)
    monkeypatch.setattr(wire, "_PREFIX", clean)
    await take(trail.client)
    monkeypatch.undo()
    await store.edge_seen(clean, time.time(), ended=True)
    await trail.rows("UPDATE edges SET seen_at = now() - interval '1 min' WHERE id = %s", dead)

    async def marked() -> bool:
        rows = await trail.rows(
            "SELECT count(*) FROM edges WHERE marked IS NOT NULL AND id IN (%s, %s)", dead, clean
        )
        return bool(rows[0][0] == 2)

    await until(marked, within=10)
    report = await trail.report()
    assert report["unsure"] == 3 and {r["edge"] for r in report["unsure_runs"]} == {dead}
    assert (await trail.verify())["ok"]
    return dead, clean


async def test_an_edges_end_set_to_hide_its_unsure_values(
    trail: Trail, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead, _ = await dead_and_clean_edges(trail, monkeypatch)
    await trail.rows("UPDATE edges SET ended_at = now() WHERE id = %s", dead)
    (hit,) = named(await trail.verify(), "edges", dead)
    assert "marked it dead" in hit["why"]
    assert (await trail.report())["unsure"] == 3, "the report reads the chained end"


async def test_an_edges_end_cleared_to_inflate_unsure_values(
    trail: Trail, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, clean = await dead_and_clean_edges(trail, monkeypatch)
    await trail.rows(
        "UPDATE edges SET ended_at = NULL, seen_at = now() - interval '1 h' WHERE id = %s", clean
    )
    (hit,) = named(await trail.verify(), "edges", clean)
    assert "marked it ended" in hit["why"]
    assert (await trail.report())["unsure"] == 3, "still only the dead edge's"


async def test_an_edges_settled_mark_moved(trail: Trail, monkeypatch: pytest.MonkeyPatch) -> None:
    dead, _ = await dead_and_clean_edges(trail, monkeypatch)
    await trail.rows("UPDATE edges SET settled_at = now() WHERE id = %s", dead)
    named(await trail.verify(), "edges", dead)
    assert (await trail.report())["unsure"] == 3


# Anchors: kept by the batcher outside Postgres, and pruned past.


async def test_the_batcher_keeps_heads_in_a_file_and_verify_holds_the_trail_to_them(
    settings: Settings, fresh_database: str, tmp_path: Path
) -> None:
    sink = tmp_path / "heads.jsonl"
    quick = settings.but(database_url=fresh_database, anchor_to=str(sink), anchor_every_s=0.2)
    async with EmbeddedStack(quick) as stack:
        transport = httpx.ASGITransport(app=stack.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
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
            async with await psycopg.AsyncConnection.connect(
                fresh_database, autocommit=True
            ) as sql:
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
    async with EmbeddedStack(quick) as stack:
        transport = httpx.ASGITransport(app=stack.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
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


async def test_edits_after_a_pause_are_still_caught(trail: Trail) -> None:
    """The batcher's own loops (marking edges, pruning) do not mend an edit away."""
    await trail.rows("UPDATE voids SET who = 'someone else' WHERE counter = %s AND first = 4", NAME)
    await asyncio.sleep(1.5)
    named(await trail.verify(), "voids", f"{NAME}//4")
