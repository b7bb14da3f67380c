"""The statements a frame's transaction and a plain frame share: the fenced checkpoint, the
addition to the counters, the floor, and the audit rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from infra.adapters.postgres.pool import rows
from infra.errors import LeaseLost
from infra.ports import Audit, Lease

# The checkpoint, fenced by the lease's epoch: a CTE that yields a row only while the lease holds.
FENCED = (
    "fenced AS ("
    " UPDATE leases SET sequence = %(sequence)s::text,"
    " applied = GREATEST(applied, %(sequence)s::numeric)"
    " WHERE stream = %(stream)s AND shard = %(shard)s AND owner = %(owner)s"
    " AND epoch = %(epoch)s RETURNING 1)"
)
# Add each delta to its counter and period; the rows come in name order, the order they are locked
# in, so that two batchers touching the same counters cannot deadlock.
ADD = (
    "INSERT INTO counter_values AS cv (counter, period, allocated)"
    " SELECT {rows} ORDER BY 1, 2"
    " ON CONFLICT (counter, period)"
    " DO UPDATE SET allocated = cv.allocated + excluded.allocated"
    " RETURNING counter, period, allocated"
)


# A period's row is not added to when it says fewer values were handed out than the audit trail
# holds (its floor, as a count): moved back by hand, it would hand them out again.
FLOOR_HOLDS = (
    "coalesce((SELECT b.allocated FROM counter_values b"
    " WHERE b.counter = {0} AND b.period = {1}), 0) >= {2}"
)


# A frame's audit rows, from a CTE `rows` (klass, keep_s, ranges, detail, names): each the next
# link of its chain, stream/shard/class, written only while the lease holds (`fenced`). `linked`
# is MATERIALIZED: inlined, its `prev` (named twice below) was looked up twice a row.
AUDIT = (
    " t AS (SELECT now() AS at),"
    " linked AS MATERIALIZED (SELECT rows.*, t.at,"
    "  t.at + make_interval(secs => rows.keep_s) AS keep,"
    "  coalesce((SELECT f.hash FROM allocation_frames f"
    "   WHERE f.chain = %(chain)s || rows.klass ORDER BY f.id DESC LIMIT 1),"
    # a chain retention pruned to nothing goes on from its last pruned row
    "   (SELECT s.after_hash FROM chain_starts s WHERE s.chain = %(chain)s || rows.klass),"
    "   '\\x'::bytea) AS prev"
    "  FROM rows, t),"
    " audit AS (INSERT INTO allocation_frames (stream, shard, sequence, chain, ranges, detail,"
    "  counters, committed_at, keep_until, prev, hash)"
    "  SELECT %(stream)s, %(shard)s, %(sequence)s::text, %(chain)s || klass, ranges, detail,"
    "  names, at, keep, prev,"
    "  sha256(prev || ledger_content(%(stream)s, %(shard)s, %(sequence)s::text, ranges, detail,"
    "  at, keep))"
    "  FROM linked WHERE EXISTS (SELECT FROM fenced) RETURNING 1)"
)


def chained(lease: Lease, sequence: str, audits: Sequence[Audit]) -> dict[str, Any]:
    """FENCED's and AUDIT's parameters: `audits` as [klass, keep_s, ranges, detail, names]."""
    return {
        **fence(lease, sequence),
        "chain": f"{lease.stream}/{lease.shard}/",
        "audits": rows([a.klass, a.keep_s, a.ranges, a.detail, named(a)] for a in audits),
    }


def named(audit: Audit) -> list[str]:
    """The counters an audit row names (its `counters` column, for finding a counter's rows):
    those its ranges hold, and those its voids and confirmations name. As the SQL function
    ledger_counters works it out, which `audit verify` holds the column to; here, so that a
    frame's statement does not parse its detail again."""
    names = {r[0] for r in audit.ranges}
    names.update(v[0] for v in audit.detail.get("v") or ())
    names.update(c[0] for c in audit.detail.get("c") or ())
    return sorted(names)


def fence(lease: Lease, sequence: str) -> dict[str, Any]:
    """FENCED's parameters."""
    return {
        "sequence": sequence,
        "stream": lease.stream,
        "shard": lease.shard,
        "owner": lease.owner,
        "epoch": lease.epoch,
    }


def lost(lease: Lease) -> LeaseLost:
    return LeaseLost(f"shard {lease.shard} has a newer owner than epoch {lease.epoch}")
