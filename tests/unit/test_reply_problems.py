"""The edge answers every reply error from one table; one it does not know is a 502, not a guess."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from functions import problems
from functions.fastpath import answer
from functions.problems import REPLY_PROBLEMS, Kind, Problem
from infra.wire import Reply, ReplyError


def test_every_reply_error_has_a_problem() -> None:
    assert set(REPLY_PROBLEMS) == set(ReplyError)


def test_the_problem_table_is_the_documented_one() -> None:
    """docs/problems.md lists every kind with its status, and nothing else."""
    documented = (Path(__file__).parents[2] / "docs" / "problems.md").read_text()
    rows = re.findall(r"^\| `(urn:numerator:problem:[a-z-]+)` \| (\d+) \|", documented, re.M)
    assert rows == [(kind.type, str(kind.status)) for kind in Kind]
    assert len({kind.title for kind in Kind}) == len(Kind)


@pytest.mark.parametrize("error", list(ReplyError))
def test_a_reply_error_becomes_its_problem(error: ReplyError) -> None:
    with pytest.raises(Problem) as caught:
        answer(Reply("k", "inv", error=error, detail="why"), 1, retry_after=3)
    kind = REPLY_PROBLEMS[error]
    assert (caught.value.status, caught.value.kind) == (kind.status, kind)
    if caught.value.status == 503:
        assert caught.value.headers["Retry-After"] == "3"


def test_an_error_missing_from_the_table_is_a_bad_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    table = dict(REPLY_PROBLEMS)
    del table[ReplyError.EXPIRED]
    monkeypatch.setattr(problems, "REPLY_PROBLEMS", table)
    monkeypatch.setattr("functions.fastpath.REPLY_PROBLEMS", table)
    with pytest.raises(Problem) as caught:
        answer(Reply("k", "inv", error=ReplyError.EXPIRED), 1, retry_after=1)
    assert (caught.value.status, caught.value.kind) == (502, Kind.BAD_REPLY)
