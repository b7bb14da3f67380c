"""What the batcher remembers records took: found by reply key until it is forgotten, and held
where the cyclic garbage collector does not walk it."""

from __future__ import annotations

import gc

from batcher.recent import Recent, RecentSpans
from infra.spans import Span


def test_a_span_is_found_by_its_key_until_forgotten() -> None:
    taken = RecentSpans()
    taken.add([("a", Span("inv", "", 1, 3)), ("b", Span("rcp", "2026", 4, 4))])
    end = taken.end
    taken.add([("c", Span("inv", "", 5, 9))])
    assert taken.get("b") == Span("rcp", "2026", 4, 4)
    assert dict(taken) == {
        "a": Span("inv", "", 1, 3),
        "b": Span("rcp", "2026", 4, 4),
        "c": Span("inv", "", 5, 9),
    }
    taken.forget(end)
    assert "a" not in taken and taken.get("b") is None
    assert taken["c"] == Span("inv", "", 5, 9) and len(taken) == 1


def test_a_key_taken_again_keeps_its_newer_span() -> None:
    taken = RecentSpans()
    taken.add([("a", Span("inv", "", 1, 1))])
    end = taken.end
    taken.add([("a", Span("inv", "", 2, 2))])
    taken.forget(end)
    assert taken["a"] == Span("inv", "", 2, 2)


def test_rows_survive_the_columns_being_compacted() -> None:
    taken = RecentSpans()
    ends = []
    for n in range(100):
        taken.add([(f"k{n}", Span("inv", "", n, n))])
        ends.append(taken.end)
    for n in range(0, 90, 7):
        taken.forget(ends[n])
        kept = range(n + 1, 100)
        assert {k: s.first for k, s in taken.items()} == {f"k{m}": m for m in kept}


def test_what_is_remembered_is_not_for_the_collector_to_walk() -> None:
    recent = Recent(frames=None, reply_timeout_s=5.0)  # type: ignore[arg-type]
    recent.remember([(f"k{n}", Span("inv", "2026", n, n)) for n in range(1000)])
    gc.collect()
    walked = {id(o) for o in gc.get_objects()}
    assert id(recent.taken._row) not in walked
    assert not any(isinstance(o, Span) for o in gc.get_referents(*vars(recent.taken).values()))


def test_spans_older_than_the_window_are_forgotten(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    now = [1000.0]
    monkeypatch.setattr("batcher.recent.time.monotonic", lambda: now[0])
    recent = Recent(frames=None, reply_timeout_s=5.0)  # type: ignore[arg-type]
    recent.remember([("a", Span("inv", "", 1, 1))])
    now[0] += 10.0
    recent.remember([("b", Span("inv", "", 2, 2))])
    now[0] += 6.0  # a's 15 s have passed, b's have not
    recent.remember([])
    assert "a" not in recent.taken and "b" in recent.taken


async def test_a_cancel_unknown_here_gets_its_frame_s_cancels_spans_only() -> None:
    class Held:
        async def held_since(self, stream: str, shard: str, seconds: float) -> list[bytes]:
            return []  # the previous owner's replies: none for "zz"

    recent = Recent(frames=Held(), reply_timeout_s=5.0)  # type: ignore[arg-type]
    recent.remember([("a", Span("inv", "", 1, 1)), ("b", Span("inv", "", 2, 2))])
    lease = type("Lease", (), {"stream": "s", "shard": "0"})()
    assert await recent.with_before(lease, {"a"}, {}) is recent.taken  # all known: no copy
    assert await recent.with_before(lease, {"a", "zz"}, {}) == {"a": Span("inv", "", 1, 1)}
