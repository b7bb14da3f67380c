"""The edge answers every reply error from one table; one it does not know is a 502, not a guess."""

from __future__ import annotations

from pathlib import Path

import pytest

from functions import problems
from functions.fastpath import answer
from functions.problems import REPLY_PROBLEMS, Problem
from infra.wire import Reply, ReplyError


def test_every_reply_error_has_a_status_and_a_documented_problem_type() -> None:
    documented = (Path(__file__).parents[2] / "docs" / "problems.md").read_text()
    assert set(REPLY_PROBLEMS) == set(ReplyError)
    for status, kind in REPLY_PROBLEMS.values():
        assert 400 <= status < 600
        assert f"urn:numerator:problem:{kind}`" in documented


@pytest.mark.parametrize("error", list(ReplyError))
def test_a_reply_error_becomes_its_problem(error: ReplyError) -> None:
    with pytest.raises(Problem) as caught:
        answer(Reply("k", "inv", error=error, detail="why"), 1, retry_after=3)
    assert (caught.value.status, caught.value.kind) == REPLY_PROBLEMS[error]
    if caught.value.status == 503:
        assert caught.value.headers["Retry-After"] == "3"


def test_an_error_missing_from_the_table_is_a_bad_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    table = dict(REPLY_PROBLEMS)
    del table[ReplyError.EXPIRED]
    monkeypatch.setattr(problems, "REPLY_PROBLEMS", table)
    monkeypatch.setattr("functions.fastpath.REPLY_PROBLEMS", table)
    with pytest.raises(Problem) as caught:
        answer(Reply("k", "inv", error=ReplyError.EXPIRED), 1, retry_after=1)
    assert (caught.value.status, caught.value.kind) == (502, "bad-reply")
