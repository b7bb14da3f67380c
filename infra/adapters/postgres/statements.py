"""The statements of a frame, read whole from frame.sql (once, at import), and their parameters:
the fenced checkpoint, the addition to the counters with its floor, the audit rows, and the
Idempotency-Keys' claims and holders."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from typing import Any

from infra.adapters.postgres.pool import objects
from infra.errors import LeaseLost
from infra.ports import Audit, Lease


def load(text: str) -> dict[str, str]:
    """The named statements of a .sql file, each after its `-- name: NAME` line up to the next:
    their comment lines and indentation dropped (a statement is sent at every frame), their
    lines joined by spaces."""
    found: dict[str, str] = {}
    name = None
    lines: list[str] = []
    for line in [*text.splitlines(), "-- name: "]:
        stripped = line.strip()
        if stripped.startswith("-- name:"):
            if name:
                found[name] = " ".join(lines).rstrip(";")
            name, lines = stripped.removeprefix("-- name:").strip(), []
        elif stripped and not stripped.startswith("--"):
            lines.append(stripped)
    return found


STATEMENTS = load((resources.files("infra.adapters.postgres") / "frame.sql").read_text())
PLAIN = STATEMENTS["plain"]
CHECKPOINT = STATEMENTS["checkpoint"]
ALLOCATE = STATEMENTS["allocate"]
RESERVE, CLAIMS, REMEMBER = STATEMENTS["reserve"], STATEMENTS["claims"], STATEMENTS["remember"]
HAND_OVER, FORGET, FREE = STATEMENTS["hand_over"], STATEMENTS["forget"], STATEMENTS["free"]


def chained(lease: Lease, sequence: str, audits: Sequence[Audit]) -> dict[str, Any]:
    """The fence's and the audit rows' parameters (`plain`, `checkpoint`)."""
    return {
        **fence(lease, sequence),
        "chain": f"{lease.stream}/{lease.shard}/",
        "audits": objects(
            {
                "klass": a.klass,
                "keep_s": a.keep_s,
                "ranges": a.ranges,
                "detail": a.detail,
                "names": named(a),
            }
            for a in audits
        ),
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
    """The fence's parameters."""
    return {
        "sequence": sequence,
        "stream": lease.stream,
        "shard": lease.shard,
        "owner": lease.owner,
        "epoch": lease.epoch,
    }


def lost(lease: Lease) -> LeaseLost:
    return LeaseLost(f"shard {lease.shard} has a newer owner than epoch {lease.epoch}")
