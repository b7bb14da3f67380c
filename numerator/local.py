"""The AWS path on one machine (`numerator up --aws moto|URL`): the endpoint, its resources, and
batcher processes beside the HTTP edge, watched while they run (`ProcessSupervisor`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

from infra.backoff import Backoff
from infra.errors import NumeratorError
from infra.run import process as processes
from infra.run.server import die_with_parent, free_port, own_folder

MOTO_MISSING = (
    "--aws moto needs moto server, which is not installed: "
    "pip install 'numerator[aws-local]' (from a clone: pip install -e '.[aws-local]')"
)


def aws_environment(endpoint: str) -> dict[str, str]:
    """What the edge and batchers need to reach `endpoint`: the endpoint, and a region and
    credentials when none are set (moto and LocalStack take any)."""
    return {"MODE": "aws", "AWS_ENDPOINT_URL": endpoint, **processes.stand_in_aws()}


def require_moto() -> None:
    """Say what to install, before anything starts, when moto server is not there."""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        raise NumeratorError(MOTO_MISSING) from None


@dataclass
class Child:
    """A process `up --aws` started and watches: `restart` says whether it is started again
    when it dies (a batcher: its state is in Postgres) or `up` stops (moto server: its stream
    and reply table die with it, and a new, empty one would be a different stream)."""

    what: str
    command: list[str]
    env: dict[str, str] | None
    url: str
    ready: str  # the path that answers once it has started (its /healthz, or moto's API)
    restart: bool
    log: IO[str] | None = None
    first_s: float = 1.0  # the first restart's backoff (jittered, doubling while it dies again)
    process: subprocess.Popen[str] = field(init=False)
    restarts: int = 0

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT if self.log is not None else None,
            preexec_fn=die_with_parent,
            start_new_session=True,  # Ctrl-C reaches `up`, which stops the parts in order
            text=True,
        )

    def wait(self) -> None:
        # Started is enough: a batcher answers 503 while its stream is not there yet.
        processes.wait_ready(
            self.process, self.url + self.ready, self.what, self.log, lambda s: s < 500
        )

    def stop(self, patience: float) -> None:
        processes.stop(self.process, signal.SIGTERM, patience)


@contextmanager
def moto_server() -> Iterator[Child]:
    """moto server on a free loopback port, in its own process (it is CPU-bound, and must not
    share a GIL with the edge), one request at a time (`numerator.motoserver`)."""
    require_moto()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "numerator.motoserver", "-H", "127.0.0.1", "-p", str(port)]
    with tempfile.TemporaryFile("w+") as log:
        child = Child("moto server", command, None, url, "/moto-api/", restart=False, log=log)
        child.start()
        try:
            child.wait()
            yield child
        finally:
            child.stop(10)


@contextmanager
def batchers(count: int, env: dict[str, str]) -> Iterator[list[Child]]:
    """`count` batcher processes, each answering its /healthz. SIGTERM at the end, so each
    finishes its frame, publishes and releases its leases."""
    children: list[Child] = []
    try:
        for number in range(1, count + 1):
            port = free_port()
            # Restarted under its own name, a batcher takes its shards back at once, instead of
            # after LEASE_TTL_S: safe, since the supervisor restarts only one it saw exit.
            owner = f"up-{os.getpid()}-{number}-{uuid.uuid4().hex[:8]}"
            command = [sys.executable, "-m", "numerator", "batcher", "--port", str(port)]
            command += ["--owner", owner]
            child = Child(
                f"batcher {number}",
                command,
                {**os.environ, **env},
                f"http://127.0.0.1:{port}",
                "/healthz",
                restart=True,
            )
            child.start()
            children.append(child)
        for child in children:
            child.wait()
        yield children
    finally:
        for child in children:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        for child in children:
            child.stop(30)


@contextmanager
def hub_batcher() -> Iterator[dict[str, str]]:
    """The machine's batcher for `--workers N` on the embedded path (two tiers, the workers'
    front frames in over a unix socket: infra/adapters/hub.py), started with this process's
    environment (the workers' settings); yields what names its socket to the workers (HUB);
    watched, and started again under its own name when it dies, while the workers answer 503."""
    with own_folder("hub") as folder:
        socket = str(folder / "batcher.sock")
        port = free_port()
        owner = f"up-{os.getpid()}-hub-{uuid.uuid4().hex[:8]}"
        command = [sys.executable, "-m", "numerator", "batcher", "--hub", socket]
        command += ["--port", str(port), "--owner", owner]
        child = Child(
            "the machine's batcher",
            command,
            dict(os.environ),
            f"http://127.0.0.1:{port}",
            "/healthz",
            restart=True,
            first_s=0.2,  # the workers answer 503 until it is back
        )
        child.start()  # not waited for: the workers start meanwhile, and connect once it listens
        try:
            with ProcessSupervisor([child]):
                yield {"HUB": socket}
        finally:
            child.stop(30)  # after the workers: their frames in flight have had their replies


class ProcessSupervisor:
    """Watches the children `up --aws` started, from a thread beside the HTTP server: a dead
    batcher is started again after a jittered backoff (up to 1 s, doubling to 30 s while it
    keeps dying within a minute), logged and counted; a dead moto server stops `up` (SIGTERM to
    itself, which the HTTP server takes as Ctrl-C), and `failed` says which child died so that
    `up` exits non-zero naming it. The edge's /healthz is red meanwhile (infra.observe.health)."""

    POLL_S = 0.25
    STEADY_S = 60.0  # a child that ran this long starts its backoff afresh

    def __init__(self, children: list[Child], stop: Callable[[], None] | None = None) -> None:
        self.children = children
        self.failed: str | None = None
        self.stop_up = stop or (lambda: os.kill(os.getpid(), signal.SIGTERM))
        self._stopping = threading.Event()
        self._backoff = {id(child): Backoff(base=child.first_s, cap=30.0) for child in children}
        self._started = {id(child): time.monotonic() for child in children}
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)

    def __enter__(self) -> ProcessSupervisor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stopping.wait(self.POLL_S):
            for child in self.children:
                status = child.process.poll()
                if status is None:
                    continue
                if not child.restart:
                    self.failed = (
                        f"{child.what} (pid {child.process.pid}) exited with status {status}: "
                        "the stream and reply table were in its memory, so this stack stops"
                    )
                    say(f"numerator: {self.failed}")
                    self.stop_up()
                    return
                self._restart(child, status)

    def _restart(self, child: Child, status: int) -> None:
        backoff = self._backoff[id(child)]
        if time.monotonic() - self._started[id(child)] >= self.STEADY_S:
            backoff.reset()
        delay = max(backoff.next(), 0.1)
        child.restarts += 1
        say(
            f"numerator: {child.what} (pid {child.process.pid}) exited with status {status}; "
            f"starting it again in {delay:.1f} s (restart {child.restarts})"
        )
        if self._stopping.wait(delay):
            return
        child.start()
        self._started[id(child)] = time.monotonic()


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
