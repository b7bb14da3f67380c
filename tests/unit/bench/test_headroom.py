"""A run's "requests / txn" explained where it is shown, with the room Postgres had left: the
report and the console summary of a 200 rps run (req/txn 1.00), recorded in runs/low.json."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

from bench import report, run
from bench.headroom import Headroom, headroom

RUNS = Path(__file__).parent / "runs"


def low() -> dict[str, object]:
    return dict(json.loads((RUNS / "low.json").read_text()))


def test_one_request_a_frame_at_a_low_rate_is_explained_with_the_headroom() -> None:
    found = headroom(low())
    assert found is not None
    assert round(found.requests_per_txn, 2) == 1.0
    # 2,000 requests in 1,998 transactions over 10 s, 2.256 s of them applying frames
    assert found.busy_share is not None and round(found.busy_share, 2) == 0.23
    assert found.times is not None and round(found.times, 1) == 4.4
    meaning, room = found.lines()
    assert "each frame held about one request" in meaning
    assert "one every 5.0 ms against a frame's transaction of 1.13 ms" in meaning
    assert "busy 23% of the run" in room and "4.4 times this run's" in room


def test_the_html_report_and_the_console_carry_them() -> None:
    recorded = low()
    html = report.build([recorded], [])
    said = run.headline([recorded])
    for shown in (html, said):
        text = unescape(re.sub(r"<[^>]+>", "", shown))
        assert "requests / txn 1.00: each frame held about one request" in text
        assert "headroom: frames kept Postgres busy 23% of the run" in text
        assert "about 886 a second, 4.4 times this run's" in text


def test_a_record_from_before_the_commit_time_was_scraped_says_so() -> None:
    recorded = json.loads((RUNS / "below.json").read_text())
    found = headroom(recorded)
    assert found is not None and found.commit_ms is None
    assert "each frame held about one request" in found.meaning()
    assert found.room().startswith("headroom: not measured")


def test_big_frames_and_baselines() -> None:
    over = headroom(json.loads((RUNS / "over.json").read_text()))
    assert over is not None and "requests came faster than frames committed" in over.meaning()
    shared = Headroom(
        requests_per_txn=40.0, requests_per_s=200.0, transactions_per_s=5.0, commit_ms=18.44
    )
    assert shared.room().endswith("about 54 a second, 10.8 times this run's."), shared.room()
    baseline = low()
    baseline["summary"] = {**baseline["summary"], "target": "row-lock"}  # type: ignore[dict-item]
    assert headroom(baseline) is None


def test_batchers_each_commit_their_own_frames() -> None:
    recorded = low()
    recorded["settings"] = {**recorded["settings"], "batchers": 2}  # type: ignore[dict-item]
    found = headroom(recorded)
    assert found is not None and found.busy_share is not None and found.times is not None
    assert round(found.busy_share, 3) == 0.113 and round(found.times, 1) == 8.9
    assert "kept each of 2 batchers busy 11% of the run" in found.room()
