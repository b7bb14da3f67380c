"""What `numerator audit verify` checks, over rows read from Postgres in one snapshot. No I/O.

The audit rows (`allocation_frames`) are the source of truth: each is a link of a hash chain
named `stream/shard/class`. Verify checks that every chain is whole (each row's hash covers its
content, each row follows the one before it, the first kept row follows where retention pruned
the chain, or starts it), and that every other table the report or the sweep reads agrees with
the chains: `voids`, `confirmations`, `counter_values` (a counter's last value) and `edges` (the
ends of edges, which decide `unsure`). A disagreement is a breach naming the table and the row.
Given heads anchored earlier outside Postgres, it also proves the trail still holds them and
only extends them; an anchor older than a chain's first kept row is reported as pruned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

EDGE_MARKS = "edges"
"""The shard name of the chains that hold the ends of edges, `stream/edges/marks`."""


@dataclass(frozen=True, slots=True)
class Row:
    """One audit row as verify reads it: `sound` when its hash covers its content; `named`
    when its `counters` column is what its ranges, voids and confirmations name."""

    id: int
    chain: str
    hash: bytes
    prev: bytes
    sound: bool
    member: bool
    named: bool
    at: datetime
    keep_until: datetime
    ranges: list[list[Any]] = field(default_factory=list)
    voids: list[list[Any]] = field(default_factory=list)
    confirms: list[list[Any]] = field(default_factory=list)
    marks: list[list[Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Start:
    """Where retention left a chain: rows up to `after_id` are gone, the last with `after_hash`."""

    after_id: int
    after_hash: bytes


@dataclass(frozen=True, slots=True)
class Breach:
    table: str
    row: Any
    why: str
    chain: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"table": self.table, "row": self.row, "why": self.why}
        if self.chain is not None:
            out["chain"] = self.chain
        return out


def chains(rows: Sequence[Row], starts: Mapping[str, Start]) -> list[Breach]:
    """Each chain whole, from its first kept row to its head (rows in id order)."""
    out: list[Breach] = []
    last: dict[str, Row] = {}
    for row in rows:
        why = _row(row, last.get(row.chain), starts.get(row.chain))
        if why:
            out.append(Breach("allocation_frames", row.id, why, row.chain))
        last[row.chain] = row
    return out


def _row(row: Row, before: Row | None, start: Start | None) -> str | None:
    if not row.member:
        return "its chain is not named by its stream and shard (the row was moved to another chain)"
    if not row.sound:
        return "its content does not match its hash"
    if not row.named:
        return "its counters column does not name what its ranges, voids and confirmations hold"
    if before is not None:
        if before.hash != row.prev:
            return (
                "it does not follow the row before it in its chain (a row was removed, "
                "inserted or changed before it)"
            )
        return None
    if start is None:
        if row.prev:
            return (
                "it is its chain's first row but follows a row the trail does not hold, and "
                "retention never pruned this chain (rows were deleted before it, or it was "
                "moved here from another chain)"
            )
        return None
    if row.prev != start.after_hash or row.id <= start.after_id:
        return (
            f"it is its chain's first kept row but does not follow row {start.after_id}, the "
            "last one retention pruned (rows were deleted after it)"
        )
    return None


def heads(rows: Iterable[Row]) -> dict[str, dict[str, Any]]:
    """Each chain's head: its newest row, that row's hash, and when it was written."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        out[row.chain] = {"row": row.id, "hash": row.hash.hex(), "at": row.at.isoformat()}
    return out


def voids(
    rows: Sequence[Row],
    table: Sequence[tuple[Any, ...]],
    now: datetime,
    only: str | None = None,
) -> list[Breach]:
    """The `voids` table against the voids the chains hold: `table` as (counter, period, first,
    last, reason, who, keep_until); of counter `only`, when given (the table was read for it,
    while its chains' rows hold other counters' too). What retention is about to prune is left
    out."""
    chained = {
        (v[0], v[1], v[2]): (v[3], v[4], v[5], row)
        for row in rows
        for v in row.voids
        if row.keep_until >= now and only in (None, v[0])
    }
    out: list[Breach] = []
    for counter, period, first, last, reason, who, keep in table:
        key = (counter, period, first)
        found = chained.pop(key, None)
        named = f"{counter}/{period}/{first}"
        if found is None:
            if keep >= now:
                out.append(Breach("voids", named, "no audit row holds this void (forged)"))
        elif found[:3] != (last, reason, who):
            out.append(
                Breach(
                    "voids",
                    named,
                    f"says {first}-{last} {reason!r} by {who!r}; audit row {found[3].id} says "
                    f"{first}-{found[0]} {found[1]!r} by {found[2]!r}",
                )
            )
    for (counter, period, first), (_, _, _, row) in chained.items():
        named = f"{counter}/{period}/{first}"
        out.append(Breach("voids", named, f"is missing; audit row {row.id} holds this void"))
    return out


def confirmations(
    rows: Sequence[Row],
    table: Sequence[tuple[Any, ...]],
    now: datetime,
    only: str | None = None,
) -> list[Breach]:
    """The `confirmations` table against the chains: `table` as (counter, period, first, last,
    who, keep_until); of counter `only`, when given."""
    chained = {
        (c[0], c[1], c[2], c[3]): (c[4], row)
        for row in rows
        for c in row.confirms
        if row.keep_until >= now and only in (None, c[0])
    }
    out: list[Breach] = []
    for counter, period, first, last, who, keep in table:
        found = chained.pop((counter, period, first, last), None)
        named = f"{counter}/{period}/{first}-{last}"
        if found is None:
            if keep >= now:
                out.append(Breach("confirmations", named, "no audit row holds it (forged)"))
        elif found[0] != who:
            why = f"says by {who!r}; audit row {found[1].id} says by {found[0]!r}"
            out.append(Breach("confirmations", named, why))
    for (counter, period, first, last), (_, row) in chained.items():
        named = f"{counter}/{period}/{first}-{last}"
        out.append(Breach("confirmations", named, f"is missing; audit row {row.id} holds it"))
    return out


def highest(rows: Iterable[Row]) -> dict[tuple[str, str], tuple[int, int]]:
    """The highest value the chains hold for each (counter, period), and the row holding it."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for row in rows:
        for name, period, _, last in row.ranges:
            found = out.get((name, period))
            if found is None or last > found[0]:
                out[(name, period)] = (last, row.id)
    return out


def counter_values(
    rows: Sequence[Row],
    table: Sequence[tuple[str, str, int, int]],
    pruned: Mapping[tuple[str, str], int],
    only: str | None = None,
) -> list[Breach]:
    """Each counter's last value (`counter_values`, as (counter, period, allocated, start))
    against the highest value its chains hold (or retention pruned); of counter `only`, when
    given."""
    top = {k: v for k, v in highest(rows).items() if only in (None, k[0])}
    out: list[Breach] = []
    for name, period, allocated, start in table:
        last = start - 1 + allocated
        named = f"{name}/{period}"
        found = top.pop((name, period), None)
        if found is not None and last < found[0]:
            why = (
                f"says the last value handed out is {last}, but audit row {found[1]} holds "
                f"values up to {found[0]}: moved back, it would hand them out again"
            )
            out.append(Breach("counter_values", named, why))
            continue
        held = max(found[0] if found else start - 1, pruned.get((name, period), start - 1))
        if last > held:
            why = (
                f"says the last value handed out is {last}, but the trail holds values only "
                f"up to {held}"
            )
            out.append(Breach("counter_values", named, why))
    for (name, period), (value, row) in top.items():
        why = f"is missing; audit row {row} holds values up to {value}"
        out.append(Breach("counter_values", f"{name}/{period}", why))
    return out


def marks(rows: Iterable[Row]) -> tuple[dict[str, tuple[int, list[Any]]], list[Breach]]:
    """The end of each edge the chains hold (the first mark), and a breach for each later
    mark of the same edge that says otherwise. A mark is [edge, seen_us, settled_us, ended_us]
    (ended_us null: the edge died)."""
    found: dict[str, tuple[int, list[Any]]] = {}
    out: list[Breach] = []
    for row in rows:
        for mark in row.marks:
            first = found.get(mark[0])
            if first is None:
                found[mark[0]] = (row.id, mark)
            elif first[1] != mark:
                why = f"marks edge {mark[0]} ended a second time, unlike row {first[0]}"
                out.append(Breach("allocation_frames", row.id, why, row.chain))
    return found, out


def edges(rows: Sequence[Row], table: Sequence[tuple[Any, ...]]) -> list[Breach]:
    """The `edges` table against the ends the chains hold: `table` as (id, seen_us, settled_us,
    ended_us, marked). An edge that spoke again after it was marked dead (a paused process
    that went on) is no breach: the mark stands, the report reads it."""
    ends, out = marks(rows)
    for edge, seen, settled, ended, marked in table:
        found = ends.get(edge)
        if found is None:
            if marked is not None:
                why = f"says audit row {marked} marked its end; no audit row did"
                out.append(Breach("edges", edge, why))
            continue
        row, (_, m_seen, m_settled, m_ended) = found
        if m_ended is not None:
            if ended != m_ended:
                why = (
                    f"says ended_at {_us(ended)}; audit row {row} marked it ended at {_us(m_ended)}"
                )
                out.append(Breach("edges", edge, why))
        elif seen <= m_seen and (ended is not None or settled != m_settled):
            why = (
                f"says ended_at {_us(ended)}, settled_at {_us(settled)}; audit row {row} marked "
                f"it dead, settled at {_us(m_settled)}"
            )
            out.append(Breach("edges", edge, why))
    return out


@dataclass(frozen=True, slots=True)
class Anchor:
    """One head kept outside Postgres: chain `chain`'s row `row` had hash `hash` (hex); `said`
    names the anchor record that says so (its time and batcher), when known."""

    chain: str
    row: int
    hash: str
    said: str = ""


@dataclass(frozen=True, slots=True)
class Held:
    """What the trail holds now for an anchored row: its chain, its hash, and whether that hash
    still covers the row's content and the hash before it (`sound`)."""

    chain: str
    hash: bytes
    sound: bool = True


def anchors_of(
    given: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]],
) -> list[Anchor]:
    """Anchored heads as verify takes them: {chain: {"row", "hash"}} (one per chain, as `audit
    heads --json` prints them) or a list of {"chain", "row", "hash", "at"?, "by"?} (every head
    of an anchor sink's records)."""
    if isinstance(given, Mapping):
        return [Anchor(c, int(h["row"]), str(h["hash"]).lower()) for c, h in given.items()]
    return [
        Anchor(
            str(h["chain"]),
            int(h["row"]),
            str(h["hash"]).lower(),
            " by ".join(str(h[k]) for k in ("at", "by") if h.get(k)),
        )
        for h in given
    ]


def conflicts(given: Iterable[Anchor]) -> list[Breach]:
    """Two anchors that disagree on one row's hash: at most one of them can be true, and a
    rewrite anchored after the true head is how such a pair comes about."""
    first: dict[tuple[str, int], Anchor] = {}
    out: list[Breach] = []
    for anchor in given:
        seen = first.setdefault((anchor.chain, anchor.row), anchor)
        if seen.hash != anchor.hash:
            one, other = seen.said or "one anchor", anchor.said or "another"
            why = (
                f"anchored twice with different hashes: {seen.hash[:16]}… ({one}) and "
                f"{anchor.hash[:16]}… ({other}): the trail was rewritten between them, or "
                "one anchor is forged"
            )
            out.append(Breach("anchors", anchor.row, why, anchor.chain))
    return out


def anchored_in(record: Mapping[str, Any]) -> list[Anchor]:
    """The heads an anchor sink's record holds, each naming the record (its time and batcher)."""
    said = " by ".join(str(record[k]) for k in ("at", "by") if record.get(k))
    return [
        Anchor(chain, int(head["row"]), str(head["hash"]).lower(), said)
        for chain, head in (record.get("heads") or {}).items()
    ]


def newest(given: Iterable[Anchor]) -> list[Anchor]:
    """Each chain's newest anchored heads: those of its highest row (more than one when
    anchors disagree on it). A trail that holds them holds every earlier head that was proven
    before them, as the batchers prove each before they anchor the next."""
    top: dict[str, list[Anchor]] = {}
    for anchor in given:
        found = top.get(anchor.chain)
        if found is None or anchor.row > found[0].row:
            top[anchor.chain] = [anchor]
        elif anchor.row == found[0].row and all(a.hash != anchor.hash for a in found):
            found.append(anchor)
    return [a for chain in sorted(top) for a in top[chain]]


def anchored(
    given: Sequence[Anchor], rows: Mapping[int, Held], starts: Mapping[str, Start]
) -> tuple[list[Breach], list[str], list[str]]:
    """Heads anchored earlier against the trail, every one of them (not only each chain's
    newest: a rewrite anchored after the true head makes the newest a forged one): each must
    still be a row of its chain with the same hash that covers its content (`chains` then
    checks every row after it follows it), or one retention has pruned past (`pruned`); two
    anchors that disagree on a row are a breach. Returns the breaches, the chains every
    anchor of which holds, and those with an anchor pruned past."""
    out = conflicts(given)
    bad: set[str] = {b.chain for b in out if b.chain}
    held: set[str] = set()
    pruned: set[str] = set()
    once = {(a.chain, a.row, a.hash): a for a in reversed(given)}  # each named by its first
    for _, anchor in sorted(once.items()):
        why = _anchor(anchor, rows.get(anchor.row), starts.get(anchor.chain))
        if why is None:
            held.add(anchor.chain)
        elif why == "pruned":
            pruned.add(anchor.chain)
        else:
            bad.add(anchor.chain)
            said = f" (anchored {anchor.said})" if anchor.said else ""
            out.append(Breach("allocation_frames", anchor.row, why + said, anchor.chain))
    return out, sorted(held - bad), sorted(pruned)


def starts_anchored(
    given: Mapping[str, Start], starts: Mapping[str, Start], past: Iterable[str]
) -> list[Breach]:
    """Where retention left each chain (`chain_starts`) against the prunes the batchers
    anchored (each chain's newest, `given`): a prune is an anchored event, so a start that
    differs from the anchored one, or one with none for a chain an anchor was pruned past
    (`past`), is rows deleted and the start forged to match (with `pruned` to hide the gap)."""
    out: list[Breach] = []
    past = set(past)
    for chain, start in sorted(starts.items()):
        kept = given.get(chain)
        if kept == start or (kept is None and chain not in past):
            continue
        if kept is None:
            why = (
                f"says retention pruned up to row {start.after_id}, past an anchored head, but "
                "no anchored prune says so: rows were deleted and the start forged (or the "
                "prune was not anchored: no ANCHOR_TO, or the sink unreachable then)"
            )
        else:
            why = (
                f"says retention pruned up to row {start.after_id}; the newest anchored prune "
                f"says up to row {kept.after_id}: rows were deleted and the start forged"
            )
        out.append(Breach("chain_starts", chain, why, chain))
    return out


def _anchor(anchor: Anchor, row: Held | None, start: Start | None) -> str | None:
    if row is not None and row.chain == anchor.chain and row.hash.hex() == anchor.hash:
        if row.sound:
            return None
        return "is the anchored head, but its content no longer matches its hash"
    if row is None and start is not None and start.after_id >= anchor.row:
        return "pruned"
    if row is None:
        return (
            f"the anchored head, row {anchor.row}, is gone: the chain was truncated or its "
            "last rows deleted"
        )
    return f"is not the anchored head {anchor.hash[:16]}…: the chain was rewritten up to it"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What verify reads, in one snapshot: the audit rows (in id order), where retention left
    each chain, and the tables checked against them, as their rows come."""

    now: datetime
    rows: list[Row]
    starts: dict[str, Start]
    voids: list[tuple[Any, ...]] = field(default_factory=list)
    confirmations: list[tuple[Any, ...]] = field(default_factory=list)
    values: list[tuple[Any, ...]] = field(default_factory=list)
    pruned: list[tuple[Any, ...]] = field(default_factory=list)
    edges: list[tuple[Any, ...]] = field(default_factory=list)
    keys: list[tuple[Any, ...]] = field(default_factory=list)
    """The live `idempotency_keys`: (counter, key, count, first, last, day)."""
    counters: list[tuple[Any, ...]] = field(default_factory=list)
    """The `counters`: (name, start, reset, timezone)."""
    runs: dict[int, list[list[Any]]] = field(default_factory=dict)
    """`detail.r` of the rows of counters with live keys, by row id."""


def verdict(
    seen: Snapshot,
    name: str | None,
    anchors: Sequence[Anchor] | None = None,
    more: Sequence[Breach] = (),
    pruned_at: Mapping[str, Start] | None = None,
) -> dict[str, Any]:
    """Every check above over one snapshot (of the counter `name`'s chains, or all for None),
    and with `anchors`, that the chains still hold the heads kept outside Postgres, with `more`
    (infra/answers.py: the tables the batchers answer from), and with `pruned_at` (each
    chain's newest anchored prune), `chain_starts` against it: what `audit verify` answers."""
    rows = seen.rows
    pruned = {(c, p): int(u) for c, p, u in seen.pruned}
    breaches = [
        *chains(rows, seen.starts),
        *voids(rows, seen.voids, seen.now, name),
        *confirmations(rows, seen.confirmations, seen.now, name),
        *counter_values(rows, seen.values, pruned, name),
        *edges(rows, seen.edges),
        *more,
    ]
    out: dict[str, Any] = {}
    if anchors is not None:
        named = {r.chain for r in rows}
        mine = [a for a in anchors if not name or a.chain in named]
        by_id = {r.id: Held(r.chain, r.hash, r.sound) for r in rows}
        late, held, gone = anchored(mine, by_id, seen.starts)
        breaches += late
        if pruned_at is not None:
            mine_starts = {c: s for c, s in seen.starts.items() if not name or c in named}
            breaches += starts_anchored(pruned_at, mine_starts, gone)
        out["anchors"] = {"held": held, "pruned": gone}
    found = heads(rows)
    return {
        "counter": name,
        "rows": len(rows),
        "chains": len(found),
        "ok": not breaches,
        "first_bad": breaches[0].to_json() if breaches else None,
        "breaches": [b.to_json() for b in breaches[:100]],
        "heads": found,
        **out,
    }


def _us(value: int | None) -> str:
    if value is None:
        return "none"
    return datetime.fromtimestamp(value / 1e6, UTC).isoformat()
