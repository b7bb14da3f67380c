"""The HTTP server every numerator process (and the bench baselines) runs under: granian.

Chosen by measurement (docs/performance.md): on this project's /next it answers more requests
than uvicorn with uvloop and httptools."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import gc
import multiprocessing
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psutil
from granian import Granian
from granian.constants import Interfaces
from granian.http import HTTP1Settings

from infra.settings import MAX_HEADER_BUFFER, Settings

WORKERS_DIR = "NUMERATOR_WORKERS_DIR"  # infra.observe.workers reads it in each worker

BACKLOG = 4096  # connections the kernel queues for accept
# Threads of each worker's Rust I/O runtime. With one, the burst of closing and re-accepting
# thousands of half-open connections every HEADER_TIMEOUT_S stalled everyone's I/O, and /next
# at high concurrency was slower; two mended both (docs/performance.md, measurements behind the
# code).
RUNTIME_THREADS = 2


def serve(
    factory: str,
    host: str,
    port: int,
    workers: int,
    settings: Settings | None = None,
    env: Mapping[str, str] | None = None,
    beside: Callable[[], contextlib.AbstractContextManager[Mapping[str, str]]] | None = None,
) -> None:
    """Serve the ASGI app that `factory` ('module:function') builds, until SIGINT or SIGTERM.

    The workers are this process's children and build their app from the environment: this is
    where `settings` (and `env`, the AWS endpoint's variables) go into it, the one place
    numerator writes its own environment.

    Slow clients: a connection that has not sent its whole head within HEADER_TIMEOUT_S is
    closed, and each worker holds up to MAX_CONNECTIONS of them (granian's default, the backlog
    2048, is what 2,100-2,600 half-open connections filled, stopping everyone else). A head
    larger than MAX_HEADER_BUFFER is refused by the server itself (431 with no body); the app
    refuses one over MAX_HEADER_BYTES with a problem.

    `beside`: what runs beside the workers (the machine's batcher, `up --workers N`), entered
    with the workers' environment set, before they start, and left after they stop; what it
    yields goes into their environment (where it listens)."""
    settings = settings or Settings()
    os.environ.update({**settings.to_env(), **(env or {})})
    open_files(settings.edge.max_connections * workers + 1024)
    server = Granian(
        factory,
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        workers=workers,
        factory=True,
        log_access=False,
        # A worker that dies (SIGKILL, the OOM killer) is started again while the others serve;
        # granian's default stopped the whole service, and `up` with it. One that dies again
        # within 5.5 s of its restart is a crash loop: then granian stops.
        respawn_failed_workers=True,
        backlog=BACKLOG,
        backpressure=settings.edge.max_connections,
        runtime_threads=RUNTIME_THREADS,
        http1_settings=HTTP1Settings(
            header_read_timeout=int(settings.edge.header_timeout_s * 1000),
            max_buffer_size=MAX_HEADER_BUFFER,
        ),
    )
    with contextlib.ExitStack() as made:
        os.environ.pop(WORKERS_DIR, None)
        if workers > 1:  # a folder for their metrics, summed by /metrics (observe.workers)
            try:
                os.environ[WORKERS_DIR] = str(made.enter_context(own_folder("workers")))
            except OSError as exc:  # a read-only file system: serve, each worker's metrics apart
                print(
                    f"/metrics is per worker: no directory for the workers' metrics ({exc})",
                    file=sys.stderr,
                )
        if beside is not None:  # started once the workers' environment is set, stopped after
            os.environ.update(made.enter_context(beside()))
        server.serve()


@contextlib.contextmanager
def own_folder(kind: str, left: Callable[[Path], bool] = lambda _: True) -> Iterator[Path]:
    """A folder of this process's in the temporary directory, `numerator-<kind>-<pid>-…`, deleted
    when the block ends. One that a SIGKILLed process left behind (its pid no longer running) is
    deleted by the next to make one of the same kind, if `left(folder)` says it may be (after
    stopping what still runs in it, say)."""
    prefix = f"numerator-{kind}-"
    for folder in Path(tempfile.gettempdir()).glob(prefix + "*"):
        owner = folder.name.removeprefix(prefix).split("-")[0]
        if owner.isdigit() and not running(int(owner)) and left(folder):
            shutil.rmtree(folder, ignore_errors=True)
    made = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def open_files(wanted: int) -> None:
    """Raise this process's limit on open files (its workers inherit it) towards `wanted`, as far
    as the hard limit allows: each connection is a file, and a soft limit of 1024 is common."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def die_with_parent() -> None:
    """Have this process sent SIGTERM when the process that started it dies, even by SIGKILL
    (Linux's PR_SET_PDEATHSIG; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)


def worker_signals() -> None:
    """Call in a granian worker once it serves (its lifespan's startup).

    - It stops with the main process: a SIGKILLed `numerator up` otherwise left its worker
      serving the port and holding Postgres connections, so that a restart found the port taken.
    - It leaves SIGINT to the main process. A terminal's Ctrl-C reaches every process of the
      group, while granian's main process also stops each worker itself; a worker given both at
      once hung in granian's signal handler in about one try in three here (py-spy:
      `set_loop_signals.<locals>.signal_handler`). Workers stop on the main process's SIGTERM.
    """
    die_with_parent()
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid != os.getppid():  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)
    with contextlib.suppress(RuntimeError, ValueError):
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
    with contextlib.suppress(ValueError):  # not the main thread: nothing to do
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def tune_gc() -> None:
    """Collect cyclic garbage less often in a server worker. Each request allocates a few dozen
    short-lived objects that reference counting frees; the default gen-0 threshold (700) runs a
    collection every few requests, whose cost lands on the hot path. Measured on /next with wrk
    -c1024, six alternating runs: 21.8k rps with the defaults, 26.8k with this."""
    gc.collect()
    gc.freeze()  # what is alive after start-up stays: never scan it again
    gc.set_threshold(100_000, 50, 100)


COLLECT_EVERY_S = 5.0


async def collecting(every: float = COLLECT_EVERY_S) -> None:
    """Collect the young generations every `every` seconds, until cancelled (a server worker's
    task beside `tune_gc`). At its threshold, garbage in cycles made slowly waited for 100,000
    allocations: through a Postgres outage every failed call leaves one (an exception, its
    traceback and the frames it holds), and a worker grew 2.5 MiB a minute for minutes on end
    (tests/e2e/test_long_outage.py). A young collection of what a few seconds left costs a
    worker nothing it would notice."""
    while True:
        await asyncio.sleep(every)
        gc.collect(1)


def running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (dead, its parent yet to reap it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# Ports this process handed out or means to listen on: a child given a port listens on it only
# once it is up, and until then the kernel may offer the same port again — to the next child, or
# to a batcher `up` starts before its edge listens on the port it was given (a batcher's /healthz
# then answered the edge's requests).
_claimed: set[int] = set()


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now, and that this process has neither
    handed out before nor claimed."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _claimed:
            _claimed.add(port)
            return port


def claim(port: int) -> None:
    """Keep free_port from handing out `port`: this process will listen on it."""
    _claimed.add(port)


def cannot_listen(host: str, port: int) -> str | None:
    """Why this process cannot listen on host:port, or None. granian listens with SO_REUSEPORT,
    so a second numerator on a taken port would share it with the first — two services, two
    databases, one address — instead of failing: probe with a bind of our own first. The probe
    sets SO_REUSEADDR, as the server does, so that it refuses a port where something listens and
    nothing else: a crashed numerator's connections in TIME-WAIT must not stop its restart."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"cannot resolve {host}: {exc}"
    family, kind, _, _, address = infos[0]
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"{host}:{port} is in use (another numerator?); choose --port"
            return f"cannot listen on {host}:{port}: {exc.strerror}"
    return None
