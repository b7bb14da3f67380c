"""infra.observe.health without I/O: answers, time limits, errors, and one run shared and reused."""

from __future__ import annotations

import asyncio

from infra.errors import StoreUnavailable
from infra.observe.health import Health, healthy, responds


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_each_check_says_ok_or_what_is_wrong() -> None:
    async def fine() -> None:
        return None

    async def gone() -> None:
        raise StoreUnavailable("Postgres is unavailable: refused")

    async def slow() -> str | None:
        await asyncio.sleep(10)
        return None

    async def trouble() -> str | None:
        return "retrying: frames"

    report = await Health(
        {"a": responds(fine), "b": responds(gone), "c": slow, "d": trouble}, timeout=0.05
    ).report()
    assert report == {
        "a": "ok",
        "b": "down: Postgres is unavailable: refused",
        "c": "down: no answer within 0.05 s",
        "d": "down: retrying: frames",
    }
    assert not healthy(report)
    assert healthy({"a": "ok"})


async def test_a_report_is_shared_while_it_runs_and_reused_while_fresh() -> None:
    calls = 0

    async def counted() -> str | None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return None

    clock = Clock()
    health = Health({"x": counted}, fresh=1.0, clock=clock)
    await asyncio.gather(*(health.report() for _ in range(10)))
    assert calls == 1, "ten probes at once: one run"
    clock.now = 0.9
    await health.report()
    assert calls == 1, "still fresh"
    clock.now = 1.1
    await health.report()
    assert calls == 2


async def test_a_scrape_never_waits_on_a_hanging_check() -> None:
    """/metrics asks `recent`: a check that hangs is down at once (none known yet), and the
    run it started answers the next scrape."""
    stuck = asyncio.Event()

    async def hangs() -> str | None:
        await stuck.wait()
        return None

    async def fine() -> str | None:
        return None

    health = Health({"store": hangs, "stream": fine}, timeout=0.5, fresh=0.0)
    began = asyncio.get_running_loop().time()
    first = await health.recent(wait=0.05)
    assert asyncio.get_running_loop().time() - began < 0.3
    assert first["store"].startswith("down") and first["stream"].startswith("down")
    await asyncio.sleep(0.6)  # the run ends: the hanging check timed out
    later = await health.recent(wait=0.05)
    assert later["store"].startswith("down: no answer within 0.5") and later["stream"] == "ok"


async def test_outcomes_are_red_while_a_call_last_failed_and_green_once_it_works() -> None:
    from infra.observe.health import OUTCOME_S, Outcomes

    now = [100.0]
    outcomes = Outcomes(lambda: now[0])
    assert await outcomes.check() is None
    outcomes.worked("put_record")
    outcomes.failed("batch_get_item", "batch_get_item: AccessDeniedException: no")
    assert await outcomes.check() == "batch_get_item: AccessDeniedException: no"
    now[0] += OUTCOME_S - 0.1
    assert await outcomes.check() is not None, "still red within OUTCOME_S"
    outcomes.worked("batch_get_item")
    assert await outcomes.check() is None, "a call that works again"
    outcomes.failed("put_record", "put_record: gave up after 6 tries")
    now[0] += OUTCOME_S
    assert await outcomes.check() is None, "a failure older than OUTCOME_S"


def test_an_alert_is_shown_beside_the_checks_and_turns_nothing_red() -> None:
    from infra.observe.health import verdict

    alerts = {"trail": "not anchoring: chain s/0/c row 5 is not the anchored head"}
    assert verdict({"store": "ok"}, alerts) == (
        200,
        {"status": "ok", "store": "ok", **{"alerts": alerts}},
    )
    assert verdict({"store": "ok"}, {}) == (200, {"status": "ok", "store": "ok"})
    assert verdict({"store": "down: gone"}, alerts)[0] == 503
