"""The soak: a million values over the AWS path while batchers and a worker die, Postgres
restarts and clients cut requests.

    python -m numerator.soak [--values 1000000] [--count 100] [--batchers 3] [--kill-every 5]
                             [--edge-workers 2] [--cuts 0.1] [--keyed 0.5]

moto server (Kinesis and DynamoDB), an embedded Postgres of its own, a 4-shard stream, several
`numerator batcher` processes and `numerator serve --aws` with `--edge-workers` HTTP workers
(front frames on). Client loops take `--count` values a request from eight counters until
`--values` have been handed out; a `--keyed` share of the requests carry an Idempotency-Key, and
a `--cuts` share are cut by their client at a random moment within 300 ms (a keyed one is sent
again with its key, as after a 503, a 504 or a failed connection). Every `--kill-every` seconds
a batcher is SIGKILLed and a fresh one started; at a third of the values one HTTP worker is
SIGKILLed (`serve` starts it again); halfway, Postgres is stopped and started again. At the end
it prints the values handed out, how many were distinct (they must be equal), the answers by
status and problem, the cuts, and the longest a request waited, then holds what the clients
received against every counter's completeness report: no value received is void, and every
value no client received is void, unsure, or of a request cut within WATCH_AFTER_S (which the
edge counts as served). It exits 1 when a value went out twice, a request got anything but a
value or a clean 503/504, or a value is unexplained.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

from functions.watch import WATCH_AFTER_S
from infra.adapters.aws import clients, create
from infra.adapters.postgres import migrate
from infra.ledger import VoidReason
from infra.observe.health import EDGE_DEAD_S
from infra.run.process import wait_ready
from infra.run.server import die_with_parent, free_port
from infra.settings import Settings
from numerator.cut import answer, exchange, request
from numerator.local import aws_environment, moto_server

COUNTERS = 8


@dataclass
class Tally:
    values: set[tuple[str, int]] = field(default_factory=set)
    handed: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    longest: float = 0.0
    kills: int = 0
    events: list[str] = field(default_factory=list)
    gaps: int = -1  # unexplained gaps, over every counter's completeness report
    unreceived: int = 0  # values issued that no client of the soak received
    abandoned: int = 0  # of those, the ones void, abandoned
    unsure: int = 0  # of those, the ones whose edge died holding their request
    unexplained: int = 0  # of those, the ones neither void nor unsure nor excused: 0
    keys: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # key: values
    twice: int = 0  # values received by two requests that are not replays of one key
    retried: int = 0  # keyed requests answered on a later try, after a cut, 503/504 or failure
    cuts: int = 0  # requests the client cut
    excused: Counter[str] = field(default_factory=Counter)  # by counter: values of early cuts
    void_received: int = 0  # values a client received that the report calls void: 0
    worker_kills: int = 0


class Batchers:
    """`numerator batcher` processes, some of which die."""

    def __init__(self, env: dict[str, str], folder: Path) -> None:
        self.env, self.folder = env, folder
        self.processes: list[subprocess.Popen[bytes]] = []
        self.started = 0

    def start(self) -> None:
        self.started += 1
        with (self.folder / f"batcher-{self.started}.log").open("w") as log:
            port = str(free_port())
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "numerator", "batcher", "--port", port],
                    env={**os.environ, **self.env},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent,
                    start_new_session=True,
                )
            )

    def kill_one(self) -> int:
        victim = self.processes.pop(random.randrange(len(self.processes)))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        return victim.pid

    def stop(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


class EdgeServer:
    """`numerator serve --aws` with its HTTP workers, one of which dies."""

    def __init__(self, env: dict[str, str], folder: Path, workers: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with (folder / "serve.log").open("w") as log:
            self.process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "numerator", "serve"),
                    *("--aws", env["AWS_ENDPOINT_URL"], "--port", str(self.port)),
                    *("--workers", str(workers)),
                ],
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
                start_new_session=True,
            )
        wait_ready(self.process, self.url + "/healthz", "numerator serve", patience=60)

    def kill_worker(self) -> int:
        victim = random.choice(psutil.Process(self.process.pid).children())
        victim.kill()
        return victim.pid

    def stop(self) -> int:
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


async def client_loop(
    client: httpx.AsyncClient, tally: Tally, args: argparse.Namespace, worker: int
) -> None:
    i = worker
    while tally.handed < args.values:
        counter = f"soak-{i % COUNTERS}"
        i += 1
        key = uuid.uuid4().hex if random.random() < args.keyed else None
        excused = 0
        for tries in range(4 if key else 1):  # a keyed request is sent again with its key
            status = await one_request(client, tally, args, counter, key)
            if status == "cut early":
                excused = args.count
            if status in ("200", "refused"):
                tally.retried += tries > 0 and status == "200"
                excused = 0
                break
        tally.excused[counter] += excused


async def one_request(
    client: httpx.AsyncClient,
    tally: Tally,
    args: argparse.Namespace,
    counter: str,
    key: str | None,
) -> str:
    """Send one request; "200", "refused" (anything but a clean failure), "cut", "cut early"
    (within WATCH_AFTER_S, which the edge counts as served), or "failed". A request to be cut
    goes on a connection of its own (numerator.cut), so that an answer that crossed its cut
    counts as received, as the service counts it."""
    cut = random.uniform(0, 0.3) if random.random() < args.cuts else None
    headers = {"Idempotency-Key": key} if key else {}
    path = f"/counters/{counter}/next?count={args.count}"
    began = time.monotonic()
    try:
        if cut is None:
            response = await client.post(path, headers=headers)
            status, body = response.status_code, response.content
        else:
            port = client.base_url.port or 80
            got = await exchange(port, request(port, path, headers), cut, 60.0)
            if got.cut_s is not None:
                tally.cuts += 1
                tally.answers["cut by the client"] += 1
                return "cut early" if got.cut_s < WATCH_AFTER_S else "cut"
            if not got.raw:
                raise OSError("closed without an answer")
            status, _, body = answer(got.raw)
    except (httpx.HTTPError, OSError, TimeoutError) as exc:
        tally.answers[f"client error {type(exc).__name__}"] += 1
        await asyncio.sleep(0.1)
        return "failed"
    return await answered(tally, counter, key, status, orjson.loads(body), time.monotonic() - began)


async def answered(
    tally: Tally, counter: str, key: str | None, status: int, body: Any, took: float
) -> str:
    """Count one answer: its values (each once, a key's replays alike), or its problem."""
    if status == 200:
        tally.longest = max(tally.longest, took)
        got = tuple(item["value"] for item in body["values"])
        tally.answers["200"] += 1
        if key is not None and key in tally.keys:
            if tally.keys[key] != (counter, got):
                raise SystemExit(f"key {key} replayed {got}, not {tally.keys[key]}")
            return "200"
        if key is not None:
            tally.keys[key] = (counter, got)
        for value in got:
            if (counter, value) in tally.values:
                tally.twice += 1
            tally.values.add((counter, value))
            tally.handed += 1
        return "200"
    kind = body.get("type", "?").rsplit(":", 1)[-1]
    tally.answers[f"{status} {kind}"] += 1
    if status not in (503, 504):
        raise SystemExit(f"the soak is broken: {status} {body}")
    await asyncio.sleep(0.1)
    return "failed"


def say(tally: Tally, began: float, event: str) -> None:
    line = f"{time.monotonic() - began:7.1f}s  {event}"
    tally.events.append(line)
    print(line, flush=True)


async def chaos(
    batchers: Batchers, edge: EdgeServer, postgres: Any, tally: Tally, every: float, target: int
) -> None:
    """Kill a batcher every `every` seconds (and start a fresh one); an HTTP worker at a third
    of the values; restart Postgres halfway."""
    from pgserver import _commands

    pg_ctl = getattr(_commands, "pg_ctl")  # noqa: B009 (made at import: mypy cannot see it)
    restarted = False
    began = time.monotonic()
    while tally.handed < target:
        await asyncio.sleep(every)
        pid = batchers.kill_one()
        tally.kills += 1
        batchers.start()
        say(tally, began, f"SIGKILL batcher {pid}, {tally.handed:,} values so far")
        if not tally.worker_kills and tally.handed >= target // 3:
            tally.worker_kills += 1
            say(tally, began, f"SIGKILL HTTP worker {edge.kill_worker()}")
        if not restarted and tally.handed >= target // 2:
            restarted = True
            say(tally, began, "Postgres stopping")
            await asyncio.to_thread(
                pg_ctl,
                ["-w", "stop", "-m", "fast"],
                pgdata=postgres.pgdata,
                user=postgres.system_user,
            )
            say(tally, began, "Postgres stopped")
            await asyncio.sleep(2)
            await asyncio.to_thread(postgres.ensure_postgres_running)
            say(tally, began, "Postgres started")


async def soak(args: argparse.Namespace, folder: Path) -> Tally:
    import pgserver

    postgres = pgserver.get_server(folder / "pgdata", cleanup_mode="stop")
    tally = Tally()
    try:
        with moto_server() as moto:
            env = aws_environment(moto.url)
            settings = Settings.from_env().but(
                database_url=str(postgres.get_uri()),
                stream_name="soak",
                reply_table="soak-replies",
                shards=args.shards,
                lease_ttl_s=args.lease_ttl,
                reply_timeout_s=10.0,
            )
            create(clients(settings, env), settings)
            await migrate(settings.database.database_url)
            batchers = Batchers({**settings.to_env(), **env}, folder)
            for _ in range(args.batchers):
                batchers.start()
            edge = EdgeServer({**settings.to_env(), **env}, folder, args.edge_workers)
            try:
                async with httpx.AsyncClient(base_url=edge.url, timeout=60) as client:
                    for i in range(COUNTERS):
                        made = await client.post("/counters", json={"name": f"soak-{i}"})
                        made.raise_for_status()
                    began = time.monotonic()
                    loops = [client_loop(client, tally, args, w) for w in range(args.workers)]
                    await asyncio.gather(
                        *loops,
                        chaos(batchers, edge, postgres, tally, args.kill_every, args.values),
                    )
                    say(tally, began, "done")
                    await audit(client, tally)
            finally:
                code = edge.stop()
                batchers.stop()
                if code != 0:
                    tally.answers[f"serve exited with status {code}"] += 1
    finally:
        postgres.cleanup()
    return tally


async def audit(client: httpx.AsyncClient, tally: Tally) -> None:
    """Every counter's completeness report: its unexplained gaps (0), what became of the values
    the soak's clients did not receive — void, abandoned (their edge gave up), unsure (issued to
    a request of an edge that died holding it), or of a request cut within WATCH_AFTER_S — and
    whether a value a client received is void (never). Asked again until a dead worker's values
    are listed unsure (EDGE_DEAD_S after its death)."""
    deadline = time.monotonic() + EDGE_DEAD_S + 10
    while True:
        reports = [await report_of(client, f"soak-{i}") for i in range(COUNTERS)]
        tally.gaps = tally.unreceived = tally.unexplained = tally.void_received = 0
        tally.abandoned = tally.unsure = 0
        for report in reports:
            tally.gaps += report["unexplained_gaps"]
            name = report["counter"]
            received = {v for c, v in tally.values if c == name}
            void = {v for run in report["voids"] for v in range(run["first"], run["last"] + 1)}
            tally.void_received += len(received & void)
            if report["issued"]:
                issued = set(range(report["first"], report["last"] + 1))
                missing = issued - received
                tally.unreceived += len(missing)
                for run in report["voids"] + report["unsure_runs"]:
                    missing -= set(range(run["first"], run["last"] + 1))
                tally.unexplained += max(0, len(missing) - tally.excused[name])
            tally.abandoned += report["voided"].get(VoidReason.ABANDONED, 0)
            tally.unsure += report["unsure"]
        if not tally.unexplained or time.monotonic() > deadline:
            return
        await asyncio.sleep(1)


async def report_of(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    answer = await client.get(f"/counters/{name}/report")
    for _ in range(20):  # Postgres may have restarted a moment ago
        if answer.status_code != 503:
            break
        await asyncio.sleep(0.5)
        answer = await client.get(f"/counters/{name}/report")
    if answer.status_code != 200:
        raise SystemExit(f"the report of {name}: {answer.status_code} {answer.text}")
    report: dict[str, Any] = answer.json()
    return report


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="numerator-soak-") as folder:
        began = time.monotonic()
        tally = asyncio.run(soak(args, Path(folder)))
        seconds = time.monotonic() - began
    return 0 if _told(tally, seconds) else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m numerator.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--values", type=int, default=1_000_000)
    parser.add_argument("--count", type=int, default=100, help="values per request (1-1000)")
    parser.add_argument("--workers", type=int, default=64, help="concurrent client loops")
    parser.add_argument("--batchers", type=int, default=3)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--kill-every", type=float, default=5.0, help="seconds between SIGKILLs")
    parser.add_argument("--lease-ttl", type=float, default=5.0, help="LEASE_TTL_S of the batchers")
    parser.add_argument("--edge-workers", type=int, default=2, help="HTTP workers of the edge")
    parser.add_argument(
        "--cuts", type=float, default=0.1, help="share of requests cut within 300 ms (0.1)"
    )
    parser.add_argument(
        "--keyed", type=float, default=0.5, help="share of requests with an Idempotency-Key (0.5)"
    )
    return parser


def _told(tally: Tally, seconds: float) -> bool:
    """Print what the soak found; whether every promise held."""
    clean = all(
        k in ("200", "cut by the client") or k.startswith(("503 ", "504 ", "client error "))
        for k in tally.answers
    )
    print(f"values handed out  {tally.handed:,}")
    print(f"distinct values    {len(tally.values):,}")
    print(f"answers            {dict(sorted(tally.answers.items()))}")
    print(f"longest wait       {tally.longest:.2f} s (a request that got its values)")
    print(
        f"killed             {tally.kills} batchers and {tally.worker_kills} HTTP worker "
        "(SIGKILL), Postgres restarted once"
    )
    print(
        f"cuts               {tally.cuts:,} requests cut by their client; {tally.retried:,} "
        "keyed requests answered on a later try"
    )
    print(f"unexplained gaps   {tally.gaps} (the completeness reports of every counter)")
    print(
        f"not received       {tally.unreceived:,} values: {tally.abandoned:,} void, abandoned; "
        f"{tally.unsure:,} unsure (their edge died holding their requests); "
        f"{sum(tally.excused.values()):,} of cuts within WATCH_AFTER_S; "
        f"{tally.unexplained:,} unexplained"
    )
    print(f"received but void  {tally.void_received:,}")
    print(f"took               {seconds:.0f} s")
    ok = (
        tally.handed == len(tally.values)
        and not tally.twice
        and clean
        and tally.gaps == tally.unexplained == tally.void_received == 0
    )
    print(
        "OK: every value once, every failure a clean 503/504, every value not received "
        "explained, none received void"
        if ok
        else "FAILED"
    )
    return ok


if __name__ == "__main__":
    sys.exit(main())
