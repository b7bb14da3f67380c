"""The supported Postgres range (infra/adapters/postgres/versions.py): versions as libpq numbers
them, the edges of the range, and the sentence a refusal says."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.adapters.postgres.versions import NEWEST, OLDEST, check, shown
from infra.errors import StoreError, UnsupportedPostgres

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("number", "text"), [(150018, "15.18"), (140000, "14.0"), (170002, "17.2"), (90624, "9.6.24")]
)
def test_versions_are_shown_as_people_write_them(number: int, text: str) -> None:
    assert shown(number) == text


def test_the_range_takes_its_edges_and_refuses_beyond_them() -> None:
    check(OLDEST * 10000, "here")
    check(NEWEST * 10000 + 99, "here")
    for number in (130021, 90624, (NEWEST + 1) * 10000 + 1):
        with pytest.raises(UnsupportedPostgres) as refused:
            check(number, "db.example:5432")
        assert str(refused.value) == (
            f"PostgreSQL {shown(number)} at db.example:5432 is not supported: numerator runs on "
            f"PostgreSQL {OLDEST} to {NEWEST} (docs/deploy.md)"
        )
        assert isinstance(refused.value, StoreError)  # said by the CLI, not a traceback


def test_the_docs_say_the_range_the_code_enforces() -> None:
    said = f"PostgreSQL {OLDEST} to {NEWEST}"
    for page in ("README.md", "docs/deploy.md"):
        assert said in (ROOT / page).read_text(), f"{page} does not say {said}"
