"""The audit trail's own statements on Postgres: `audit verify` (read in one snapshot, judged by
infra/trail.py), the heads, and the chained ends of edges. Used by the ledger and leases
roles."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from infra import answers, trail
from infra.adapters.postgres.pool import Connection
from infra.ledger import EdgeEnd

# A row's detail is read once (`d`: a hot counter's lists hundreds of runs of who took what,
# kilobytes stored compressed; reading it for each use was most of a verify's time), for its hash
# and for its voids, confirmations and ends of edges, which are parsed only in the rows that have
# any: the batchers write `detail` with orjson, "r" first and "v" next, so a row with none ends
# in `"v":[]}` (a row spelled otherwise has a hash that no longer matches).
ROWS = (
    "SELECT id, chain, hash, prev,"
    " hash = sha256(prev || ledger_content_text(stream, shard, sequence, ranges, d,"
    "  committed_at, keep_until)),"
    " starts_with(chain, stream || '/' || shard || '/'), counters, committed_at, keep_until,"
    " ranges::text, (j -> 'v')::text, (j -> 'c')::text, (j -> 'e')::text"
    " FROM (SELECT *, CASE WHEN d LIKE '%%\"v\":[]}}' THEN NULL ELSE d::json END AS j"
    "  FROM (SELECT id, chain, hash, prev, stream, shard, sequence, ranges, counters,"
    "   committed_at, keep_until, detail::text || '' AS d"
    "   FROM allocation_frames{where} OFFSET 0) AS f OFFSET 0) AS g"
)
# (no ORDER BY: sorting rows that carry their detail spilled to disk; sorted here instead)
# Only the chains holding the counter's rows (and the chains of edge marks).
OF_COUNTER = (
    " WHERE chain IN (SELECT DISTINCT chain FROM allocation_frames"
    " WHERE counters @> ARRAY[%(name)s]) OR shard = 'edges'"
)
US = "floor(extract(epoch FROM {0}) * 1000000)::bigint"


def row(found: tuple[Any, ...]) -> trail.Row:
    """An audit row as verify judges it: `named` worked out here from what the hash covers."""
    id, chain, hash, prev, sound, member, counters, at, keep, ranges, v, c, e = found
    parsed_ranges = orjson.loads(ranges)
    voids, confirms = orjson.loads(v) if v else [], orjson.loads(c) if c else []
    names = {r[0] for r in parsed_ranges} | {v[0] for v in voids} | {c[0] for c in confirms}
    return trail.Row(
        id,
        chain,
        bytes(hash),
        bytes(prev),
        bool(sound),
        bool(member),
        sorted(names) == sorted(counters),
        at,
        keep,
        parsed_ranges,
        voids,
        confirms,
        orjson.loads(e) if e else [],
    )


async def verify(
    conn: Connection,
    name: str | None,
    anchors: Sequence[trail.Anchor] | None,
    pruned_at: Mapping[str, trail.Start] | None = None,
) -> dict[str, Any]:
    """Every check of infra/trail.py over one snapshot of the trail and the tables beside it."""
    seen = await snapshot(conn, name)
    return trail.verdict(seen, name, anchors, answers.checked(seen), pruned_at)


async def snapshot(conn: Connection, name: str | None) -> trail.Snapshot:
    """What verify reads, in one repeatable-read transaction: the counter's chains (every
    chain, for None) and the rows of the tables checked against them."""
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        params = {"name": name}

        async def fetch(sql: str, **more: Any) -> list[tuple[Any, ...]]:
            cur = await conn.execute(sql.encode(), {**params, **more})
            return await cur.fetchall()

        (now,) = (await fetch("SELECT now()"))[0]
        found = await fetch(ROWS.format(where=OF_COUNTER if name else ""))
        starts = {
            c: trail.Start(int(i), bytes(h))
            for c, i, h in await fetch("SELECT chain, after_id, after_hash FROM chain_starts")
        }
        only = " WHERE counter = %(name)s" if name else ""
        return trail.Snapshot(
            now,
            sorted((row(r) for r in found), key=lambda r: r.id),
            starts,
            await fetch(
                "SELECT counter, period, first, last, reason, who, keep_until FROM voids" + only
            ),
            await fetch(
                "SELECT counter, period, first, last, who, keep_until FROM confirmations" + only
            ),
            await fetch(
                "SELECT v.counter, v.period, v.allocated, c.start FROM counter_values v"
                " JOIN counters c ON c.name = v.counter" + only.replace("counter", "v.counter")
            ),
            await fetch("SELECT counter, period, upto FROM pruned" + only),
            await fetch(
                f"SELECT id, {US.format('seen_at')}, {US.format('settled_at')},"
                f" {US.format('ended_at')}, marked FROM edges"
            ),
            *await answered(fetch, only),
        )


async def answered(
    fetch: Callable[..., Awaitable[list[tuple[Any, ...]]]], only: str
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], dict[int, list[list[Any]]]]:
    """What infra/answers.py holds to the chain: the live idempotency keys, the counters, and
    the runs (`detail.r`) of the rows of counters with live keys, which only those need."""
    keys = await fetch(
        "SELECT counter, key, count, first, last, day FROM idempotency_keys"
        " WHERE expires_at > now()" + only.replace(" WHERE", " AND")
    )
    counters = await fetch(
        "SELECT name, start, reset, timezone FROM counters" + only.replace("counter", "name")
    )
    keyed = sorted({k[0] for k in keys})
    runs: dict[int, list[list[Any]]] = {}
    if keyed:
        found = await fetch(
            "SELECT id, (detail -> 'r')::text FROM allocation_frames"
            " WHERE counters && %(keyed)s::text[] AND detail IS NOT NULL",
            keyed=keyed,
        )
        runs = {int(i): orjson.loads(r) for i, r in found if r}
    return keys, counters, runs


async def holds(conn: Connection, anchors: Sequence[trail.Anchor]) -> list[trail.Breach]:
    """The anchored heads against the trail now (infra/trail.py `anchored`): only their rows,
    and where retention left their chains, are read."""
    if not anchors:
        return []
    cur = await conn.execute(
        "SELECT id, chain, hash, hash = sha256(prev || ledger_content_text(stream, shard,"
        " sequence, ranges, detail::text, committed_at, keep_until))"
        " FROM allocation_frames WHERE id = ANY(%s)",
        (sorted({a.row for a in anchors}),),
    )
    rows = {int(i): trail.Held(c, bytes(h), bool(s)) for i, c, h, s in await cur.fetchall()}
    cur = await conn.execute(
        "SELECT chain, after_id, after_hash FROM chain_starts WHERE chain = ANY(%s)",
        (sorted({a.chain for a in anchors}),),
    )
    starts = {c: trail.Start(int(i), bytes(h)) for c, i, h in await cur.fetchall()}
    return trail.anchored(anchors, rows, starts)[0]


async def heads(conn: Connection) -> dict[str, dict[str, Any]]:
    """Each chain's head: its newest row, that row's hash and time."""
    cur = await conn.execute(
        "SELECT DISTINCT ON (chain) chain, id, hash, committed_at FROM allocation_frames"
        " ORDER BY chain, id DESC"
    )
    return {
        chain: {"row": int(id), "hash": bytes(digest).hex(), "at": at.isoformat()}
        for chain, id, digest, at in await cur.fetchall()
    }


async def mark_edges(conn: Connection, stream: str, silent: float, keep_s: float) -> int:
    """Chain the end of every edge that ended or went silent for `silent` seconds and has no
    mark yet, in one row of `stream/edges/marks` (batchers of a stream take turns by an
    advisory lock). A row is kept `keep_s`, and at least as long as the longest retention of any
    counter (and a year): the values an edge's end explains are kept that long."""
    chain = f"{stream}/{trail.EDGE_MARKS}/marks"
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (chain,))
        cur = await conn.execute(
            f"SELECT id, {US.format('seen_at')}, {US.format('settled_at')},"
            f" {US.format('ended_at')} FROM edges WHERE marked IS NULL"
            " AND (ended_at IS NOT NULL OR seen_at < now() - make_interval(secs => %s))"
            " ORDER BY id LIMIT 1000 FOR UPDATE",
            (silent,),
        )
        ends = [list(r) for r in await cur.fetchall()]
        if not ends:
            return 0
        detail = orjson.dumps({"e": ends}).decode()
        cur = await conn.execute(
            "WITH last AS (SELECT hash, keep_until FROM allocation_frames WHERE chain = %(chain)s"
            "  ORDER BY id DESC LIMIT 1),"
            " t AS (SELECT now() AS at, greatest((SELECT keep_until FROM last),"
            "  now() + make_interval(secs => %(keep)s), now() + make_interval(days =>"
            "  (SELECT coalesce(max(retention_days), 0) + 367 FROM counters))) AS keep),"
            " p AS (SELECT coalesce((SELECT hash FROM last), (SELECT after_hash FROM"
            "  chain_starts WHERE chain = %(chain)s), '\\x'::bytea) AS prev)"
            " INSERT INTO allocation_frames (stream, shard, sequence, chain, ranges, detail,"
            "  counters, committed_at, keep_until, prev, hash)"
            " SELECT %(stream)s, %(shard)s, '0', %(chain)s, '[]'::json, %(detail)s::json, '{}',"
            "  t.at, t.keep, p.prev, sha256(p.prev || ledger_content(%(stream)s, %(shard)s, '0',"
            "  '[]'::json, %(detail)s::json, t.at, t.keep)) FROM t, p RETURNING id",
            {
                "chain": chain,
                "keep": keep_s,
                "stream": stream,
                "shard": trail.EDGE_MARKS,
                "detail": detail,
            },
        )
        made = await cur.fetchone()
        assert made is not None
        await conn.execute(
            "UPDATE edges SET marked = %s WHERE id = ANY(%s)", (made[0], [e[0] for e in ends])
        )
        return len(ends)


async def dead_edges(conn: Connection, edges: Collection[str], silent: float) -> dict[str, EdgeEnd]:
    """Which of `edges` died: as the chain marked their ends (the first mark of each); for an
    edge not marked yet (it died within the last few seconds), as its `edges` row says."""
    cur = await conn.execute(
        "SELECT DISTINCT ON (e->>0) e->>0, (e->>1)::bigint, (e->>2)::bigint, e->>3"
        " FROM allocation_frames f, json_array_elements(f.detail -> 'e') AS e"
        " WHERE f.shard = 'edges' AND e->>0 = ANY(%s) ORDER BY e->>0, f.id",
        (list(edges),),
    )
    marked = await cur.fetchall()
    out = {
        edge: EdgeEnd(_at(seen), _at(settled))
        for edge, seen, settled, ended in marked
        if ended is None
    }
    rest = [e for e in edges if e not in {m[0] for m in marked}]
    if rest:
        cur = await conn.execute(
            "SELECT id, seen_at, settled_at FROM edges WHERE id = ANY(%s) AND ended_at IS NULL"
            " AND marked IS NULL AND seen_at < now() - make_interval(secs => %s)",
            (rest, silent),
        )
        out.update({id: EdgeEnd(seen, settled) for id, seen, settled in await cur.fetchall()})
    return out


def _at(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1e6, UTC)
