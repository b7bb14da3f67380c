"""bench.hotprofile's reading of py-spy's raw stacks: the worker's main thread only, cut at
granian's worker frame, counted by self and inclusive share."""

from __future__ import annotations

from bench.hotprofile import parse, profile, report

MAIN = "_run_module_as_main (<frozen runpy>:198);main (numerator/cli.py:20)"
WORKER = MAIN + ";MPServer._spawn_asgi_lifespan_worker (granian/server/mp.py:81)"
RAW = f"""{WORKER} 20
{WORKER};future_watcher (granian/_futures.py:12);FastPath.serve (functions/fastpath.py:240) 50
{WORKER};future_watcher (granian/_futures.py:12);FastPath.serve (functions/fastpath.py:251);read (functions/heads.py:9) 10
{WORKER};ShardLoop.run (batcher/shard.py:40) 20
 7
tokio-runtime-worker 3
"""  # noqa: E501


def test_only_the_main_thread_counts_and_stacks_start_at_the_worker() -> None:
    rows = parse(RAW)
    assert sum(count for _, count in rows) == 100  # the Rust threads' lines are not its
    assert rows[0] == ([], 20)
    assert rows[2][0] == [
        "future_watcher (granian/_futures.py)",
        "FastPath.serve (functions/fastpath.py)",  # line numbers dropped: one frame, two lines
        "read (functions/heads.py)",
    ]


def test_shares_by_self_and_inclusive_with_the_cpu_a_request_they_stand_for() -> None:
    found = profile(parse(RAW))
    assert found.samples == 100
    assert found.top(found.own, 2) == [
        ("FastPath.serve (functions/fastpath.py)", 0.5),
        ("(the event loop, native)", 0.2),
    ]
    assert dict(found.top(found.within, 10))["FastPath.serve (functions/fastpath.py)"] == 0.6
    shown = report(found, 50.0, 3).splitlines()
    assert shown[2] == " 50.0%   25.0 µs  FastPath.serve (functions/fastpath.py)"
    assert " 60.0%   30.0 µs  FastPath.serve (functions/fastpath.py)" in shown
