"""The batcher's jobs and the store's roles apart (issue 32): each job runs against a double of
the one role it uses; the crash tests' faults come in one object, read from the environment by
no module at import; verify's judgement and the audit rows' shapes without Postgres."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from batcher.chores import Sweep
from batcher.known import Known
from batcher.stopping import Stopping
from infra import trail
from infra.adapters.postgres.pool import rows
from infra.counters import Counter, Reset
from infra.faults import Faults
from infra.ledger import VoidReason
from infra.ports import Overdue, Unconfirmed
from infra.settings import RetentionSettings
from infra.spans import Run, Span
from infra.wire import Demand, Void

NOW = datetime(2026, 12, 2, tzinfo=UTC)
ROOT = Path(__file__).parents[2]


class Ledger:
    """The Ledger role's double: the sweep's three calls, nothing of counters, keys or frames."""

    def __init__(self, counter: Counter, spans: list[Overdue]) -> None:
        self.counter, self.spans = counter, spans
        self.swept_to: Any = None

    async def confirming(self) -> list[Counter]:
        return [self.counter]

    async def unconfirmed(self, counter: Counter, ttl: float) -> Unconfirmed:
        return Unconfirmed(self.spans, NOW)

    async def swept(self, name: str, upto: datetime) -> None:
        self.swept_to = (name, upto)


class Stream:
    name, durable = "s", True
    reads = None

    def __init__(self) -> None:
        self.put_: list[Demand] = []

    async def put(self, records: Sequence[Demand], shard: str | None = None) -> None:
        self.put_ += records


def test_the_sweep_runs_on_the_ledger_role_alone() -> None:
    overdue = [Overdue("", 1, 3), Overdue("", 7, 7)]
    ledger, stream = Ledger(Counter("inv", confirm=True), overdue), Stream()
    sweep = Sweep(stream, ledger, RetentionSettings(), Stopping())  # type: ignore[arg-type]
    asyncio.run(sweep.once())
    voids = [r for r in stream.put_ if isinstance(r, Void)]
    assert [(v.first, v.last, v.reason) for v in voids] == [
        (1, 3, VoidReason.NOT_CONFIRMED),
        (7, 7, VoidReason.NOT_CONFIRMED),
    ]
    assert ledger.swept_to == ("inv", NOW)


class Counters:
    def __init__(self, *counters: Counter) -> None:
        self.known = {c.name: c for c in counters}
        self.asked: list[list[str]] = []

    async def get_many(self, names: Sequence[str]) -> dict[str, Counter]:
        self.asked.append(sorted(names))
        return {n: self.known[n] for n in names if n in self.known}


class Frames:
    def __init__(self, highest: dict[tuple[str, str], int]) -> None:
        self.top = highest

    async def highest(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        return {p: self.top[p] for p in pairs if p in self.top}


def test_what_a_batcher_knows_of_counters_is_read_once_and_floors_only_rise() -> None:
    counters = Counters(Counter("inv"), Counter("rcp", reset=Reset.YEARLY))
    known = Known(counters, Frames({("inv", ""): 40}), lambda: NOW)  # type: ignore[arg-type]

    async def learn() -> None:
        await known.learn({"inv", "rcp", "gone"})
        await known.learn({"inv", "gone"})

    asyncio.run(learn())
    # only what is not known is asked again
    assert counters.asked == [["gone", "inv", "rcp"], ["gone"]]
    assert known.floors == {("inv", ""): 40}
    known.taken([Span("inv", "", 41, 45), Span("rcp", "2026", 1, 2), Span("inv", "", 3, 3)])
    assert known.floors == {("inv", ""): 45, ("rcp", "2026"): 2}


def test_faults_are_one_object_read_from_the_environment_by_no_module_at_import() -> None:
    assert Faults.from_env({}) == Faults(0.0, 0.0)
    env = {"NUMERATOR_PAUSE_IN_FRAME_S": "12", "NUMERATOR_PAUSE_BEFORE_PUBLISH_S": "30"}
    assert Faults.from_env(env) == Faults(pause_in_frame_s=12.0, pause_before_publish_s=30.0)
    readers = []
    for path in [*ROOT.glob("infra/**/*.py"), *ROOT.glob("batcher/**/*.py")]:
        if path.name == "faults.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and str(node.value).startswith("NUMERATOR_PAUSE_"):
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert readers == [], "a fault switch read outside infra/faults.py"


def test_spans_and_runs_are_written_as_the_arrays_the_chains_hash() -> None:
    spans = [Span("inv", "", 1, 3)]
    runs = [Run(3, "key:a", None, "e1")]
    arrays = [[[["inv", "", 1, 3]], [[3, "key:a", None, "e1"]]]]
    assert rows([[spans, runs]]) == orjson.dumps(arrays).decode()
    assert Run.of([2, "who"]) == Run(2, "who", None, None), "a row from before keys and edges"
    assert Run.of([2, "who", "k"]).key == "k"


def link(id: int, prev: bytes, **rest: Any) -> trail.Row:
    fields = {"sound": True, "member": True, "named": True, "chain": "s/0/c"}
    fields.update(rest)
    keep = NOW + timedelta(days=1)
    return trail.Row(id=id, hash=bytes([id]), prev=prev, at=NOW, keep_until=keep, **fields)


def test_verify_judges_a_snapshot_without_postgres() -> None:
    whole = trail.Snapshot(NOW, [link(1, b""), link(2, bytes([1]))], {})
    found = trail.verdict(whole, None, trail.anchors_of({"s/0/c": {"row": 1, "hash": "01"}}))
    assert found["ok"] and found["rows"] == 2 and found["chains"] == 1
    assert found["anchors"] == {"held": ["s/0/c"], "pruned": []}
    assert found["heads"]["s/0/c"]["row"] == 2
    broken = trail.Snapshot(NOW, [link(1, b""), link(3, bytes([2]))], {})
    found = trail.verdict(broken, None)
    assert not found["ok"] and found["first_bad"]["row"] == 3 and "anchors" not in found
