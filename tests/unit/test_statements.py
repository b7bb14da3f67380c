"""The frame's statements as frame.sql holds them (infra/adapters/postgres/statements.py): read
by name, comments dropped, and the parts `plain` and `checkpoint` share written the same in both,
so that a plain frame and a frame's transaction chain their audit rows alike."""

from __future__ import annotations

import re

from infra.adapters.postgres.statements import CHECKPOINT, PLAIN, STATEMENTS, load


def test_a_sql_file_is_read_by_name_without_its_comments() -> None:
    text = "-- its own words\n\n-- name: one\n-- why\nSELECT 1\n  FROM t;\n-- name: two\nSELECT 2;"
    assert load(text) == {"one": "SELECT 1 FROM t", "two": "SELECT 2"}


def cte(statement: str, name: str) -> str:
    """The body of one CTE of a statement: from its opening parenthesis to the matching one."""
    found = re.search(rf"\b{name} AS (?:MATERIALIZED )?\(", statement)
    assert found, (name, statement)
    depth, start = 1, found.end()
    for at in range(start, len(statement)):
        depth += {"(": 1, ")": -1}.get(statement[at], 0)
        if not depth:
            return statement[start:at]
    raise AssertionError(f"{name} is not closed")


def test_plain_and_checkpoint_fence_and_chain_alike() -> None:
    for name in ("fenced", "t", "linked", "audit"):
        assert cte(PLAIN, name) == cte(CHECKPOINT, name), name
    assert "prev" in cte(PLAIN, "linked") and "sha256" in cte(PLAIN, "audit")
    assert set(STATEMENTS) >= {"plain", "checkpoint", "allocate", "reserve", "remember", "free"}
    assert not any("--" in statement or ";" in statement for statement in STATEMENTS.values())
