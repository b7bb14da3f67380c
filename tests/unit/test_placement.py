"""Where an edge's puts go on phased beats (infra/adapters/kinesis.py `Placement`): a shard
whose replies are overdue is passed over for AVOID_S, then probed by one put."""

from __future__ import annotations

import logging

import pytest

from infra.adapters import kinesis
from infra.adapters.beats import KEYS, Phases
from infra.adapters.kinesis import Placement
from infra.observe.metrics import Metrics

R = 0.2
T = 1_764_000_000.0  # a beat
QUARTER = KEYS // 4


def placement(metrics: Metrics) -> Placement:
    found = Placement(R, metrics)
    found.phases = Phases(R, [(f"shard-{n}", n * QUARTER) for n in range(4)])
    return found


def test_a_shard_with_an_overdue_reply_is_avoided_then_probed_by_one_put(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Avoided for AVOID_S; then one put goes there (a probe) and the others keep away until
    the probe's reply comes (the shard is read again) or it is overdue too (avoided again,
    not counted anew)."""
    clock = [100.0]
    monkeypatch.setattr(kinesis.time, "monotonic", lambda: clock[0])
    metrics = Metrics()
    places = placement(metrics)
    aim = places.chosen(T + 0.06)
    assert aim == str(2 * QUARTER)
    places.landed("edge-1", aim, "shard-2", 0.1)
    places.landed("edge-2", None, "shard-2", 0.1)  # keyed: by its partition key
    clock[0] += 1.1
    answered_in_time(places, "shard-3", 0.1)  # another shard is read meanwhile
    clock[0] += 0.4
    places.slow("edge-2", 1.5)
    assert places.chosen(T + 0.06) == aim, "a keyed record's shard is where its retries meet"
    places.slow("edge-1", 1.5)
    with caplog.at_level(logging.WARNING, logger="numerator.kinesis"):
        places.slow("edge-1", 1.7)  # told again while avoided: counted once, not a probe's
    assert "probe" not in caplog.text
    assert places.chosen(T + 0.06) == str(3 * QUARTER)
    assert places.choose(T + 0.06)[0] == str(3 * QUARTER), "a frame is timed as it is put"
    assert metrics.shards_avoided.value == 1
    clock[0] += kinesis.AVOID_S
    assert places.choose(T + 0.06)[0] == aim, "timing a frame for it probes nothing"
    assert places.chosen(T + 0.06) == aim, "one put goes there: the probe"
    places.landed("edge-3", aim, "shard-2", 0.1)
    assert places.chosen(T + 0.06) == str(3 * QUARTER), "the others keep away meanwhile"
    with caplog.at_level(logging.WARNING, logger="numerator.kinesis"):
        places.slow("edge-3", 1.1)  # the probe's reply is overdue too
    assert metrics.shards_avoided.value == 1
    assert "for the probe of the shard" in caplog.text
    clock[0] += kinesis.AVOID_S - 1
    assert places.chosen(T + 0.06) == str(3 * QUARTER)
    clock[0] += 1
    assert places.chosen(T + 0.06) == aim, "the next probe"
    places.landed("edge-4", aim, "shard-2", 0.1)
    places.heard("edge-4")  # its reply came: the shard is read again
    assert places.avoided == {}
    assert places.chosen(T + 0.06) == aim


def answered_in_time(places: Placement, shard: str, waited: float = 0.05) -> None:
    """A record put on `shard` `waited` seconds ago, whose reply came now, in time."""
    number = int(shard.rsplit("-", 1)[1])
    key = f"on-{shard}-{len(places.placed)}"
    places.landed(key, str(number * QUARTER), shard, 0.1)
    places.heard(key, timely=True, waited=waited)


def test_a_shard_no_slower_than_the_others_is_not_avoided(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An overdue reply avoids its shard only when another shard has lately (within
    EVIDENCE_S, not within the last beat) answered in time a record put after it, and its own
    shard has answered nothing in time since: not for a container's first request (no reply
    came yet); nor when every shard stalls at once, even where one shard's last beat before it
    answered a record put after the overdue one (an outsider froze both batchers: with a first
    version all four shards were passed over, with a second one shard in some runs); nor as
    they thaw and another shard's beat comes first; nor on a late reply's word."""
    clock = [100.0]
    monkeypatch.setattr(kinesis.time, "monotonic", lambda: clock[0])
    metrics = Metrics()
    places = placement(metrics)  # a beat of R = 0.2 s
    aim = str(2 * QUARTER)
    with caplog.at_level(logging.WARNING, logger="numerator.kinesis"):
        places.landed("first", aim, "shard-2", 0.1)
        places.slow("first", 1.5)  # nothing heard yet
        answered_in_time(places, "shard-1")
        clock[0] = 100.1
        places.landed("stalled", aim, "shard-2", 0.1)
        clock[0] = 100.15  # shard 3's last beat before every shard stalls, at 100.2
        answered_in_time(places, "shard-3", 0.03)
        clock[0] = 101.1
        places.slow("stalled", 1.0)
        places.landed("late", str(3 * QUARTER), "shard-3", 0.1)
        places.heard("late", timely=False, waited=1.2)
        clock[0] = 101.2  # they thaw at 101.15: shard 1's beat comes first
        answered_in_time(places, "shard-1", 0.9)
        clock[0] = 101.25
        places.slow("stalled", 1.15)
        answered_in_time(places, "shard-2", 0.9)  # then its own
    assert (places.avoided, metrics.shards_avoided.value, caplog.text) == ({}, 0, "")
    clock[0] = 102.0
    places.landed("frozen", aim, "shard-2", 0.1)  # from here its shard alone stalls
    for at in (102.2, 102.4, 102.6, 102.8):  # the others read on their beats
        clock[0] = at
        answered_in_time(places, "shard-1", 0.1)
    clock[0] = 103.0
    places.slow("frozen", 1.0)
    assert list(places.avoided) == [aim] and metrics.shards_avoided.value == 1


def test_a_reply_overdue_for_a_record_not_placed_here_avoids_nothing() -> None:
    places = placement(Metrics())
    places.slow("edge-unknown", 3.0)
    assert places.avoided == {}
