"""The port probe refuses a port where something listens, and nothing else."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from infra.run import server
from infra.run.server import cannot_listen, claim, free_port, own_folder


def test_a_listening_port_is_refused() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cannot_listen("127.0.0.1", port) == (
            f"127.0.0.1:{port} is in use (another numerator?); choose --port"
        )


def test_free_port_hands_no_port_out_twice_nor_one_claimed() -> None:
    """`up` starts its batchers, each on a port of free_port's, before its edge listens on its
    own: the kernel's offers repeat (a thousand draws from its 28,000 ports all but surely do),
    and a batcher given the edge's port answered the edge's requests with 404 (CI, the pooler
    test's Lambda edge)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        mine = probe.getsockname()[1]
    claim(mine)
    drawn = [free_port() for _ in range(1000)]
    assert len(set(drawn)) == len(drawn)
    assert mine not in drawn


def test_a_port_whose_connections_linger_in_time_wait_is_free() -> None:
    """What a SIGKILLed server leaves behind: its side of closed connections in TIME-WAIT. The
    server listened with SO_REUSEADDR, as granian does."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server closes first: its end goes to TIME-WAIT
        client.close()
    with socket.socket() as plain:  # the scenario is real: a bind without SO_REUSEADDR fails
        try:
            plain.bind(("127.0.0.1", port))
            failed = 0
        except OSError as exc:
            failed = exc.errno
    assert failed == errno.EADDRINUSE
    assert cannot_listen("127.0.0.1", port) is None


def test_a_workers_directory_a_killed_server_left_is_removed_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    left = tmp_path / f"numerator-workers-{dead.pid}-abc"
    live = tmp_path / f"numerator-workers-{os.getppid()}-def"  # another server, still running
    for made in (left, live):
        made.mkdir()
        (made / "1.json").write_text("{}")
    with own_folder("workers") as mine:
        assert Path(mine).name.startswith(f"numerator-workers-{os.getpid()}-")
        assert not left.exists() and live.exists()
    assert not Path(mine).exists()


class Served:
    """Stands in for granian: what a worker would find in its environment."""

    found: list[str | None] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def serve(self) -> None:
        given = os.environ.get(server.WORKERS_DIR)
        Served.found.append(given)
        assert given is None or Path(given).is_dir()


def test_several_workers_are_given_a_directory_for_their_metrics_removed_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "Granian", Served)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    Served.found = []
    server.serve("x:y", "127.0.0.1", 0, 2)
    server.serve("x:y", "127.0.0.1", 0, 1)
    given, alone = Served.found
    assert given is not None and Path(given).parent == tmp_path and not Path(given).exists()
    assert alone is None, "one worker has no other to add up"


def test_without_a_writable_directory_the_workers_serve_with_their_own_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(server, "Granian", Served)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    Served.found = []
    server.serve("x:y", "127.0.0.1", 0, 2)
    assert Served.found == [None]
    assert (
        "/metrics is per worker: no directory for the workers' metrics" in capsys.readouterr().err
    )


async def test_a_worker_collects_cyclic_garbage_made_slowly() -> None:
    """At tune_gc's threshold a cycle made now and then (a failed call's exception and its
    traceback, through an outage) waited for 100,000 allocations; `collecting` frees it within
    its period."""
    import asyncio
    import contextlib
    import gc
    import weakref

    from infra.run.server import collecting

    class Node:
        pass

    thresholds = gc.get_threshold()
    gc.collect()
    gc.set_threshold(100_000, 50, 100)
    try:
        node = Node()
        node.me = node  # type: ignore[attr-defined]
        gone = weakref.ref(node)
        del node
        await asyncio.sleep(0.05)
        assert gone() is not None, "collected without `collecting`: this test proves nothing"
        task = asyncio.create_task(collecting(every=0.01))
        await asyncio.sleep(0.1)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert gone() is None
    finally:
        gc.set_threshold(*thresholds)
