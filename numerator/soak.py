"""The soak: a million values over the AWS path while batchers die and Postgres restarts.

    python -m numerator.soak [--values 1000000] [--count 100] [--batchers 3] [--kill-every 5]

moto server (Kinesis and DynamoDB), an embedded Postgres of its own, a 4-shard stream, several
`numerator batcher` processes and the server edge (front frames on). Client loops take `--count`
values a request from eight counters until `--values` have been handed out. Every `--kill-every`
seconds a batcher is SIGKILLed and a fresh one started; halfway, Postgres is stopped and started
again. At the end it prints the values handed out, how many were distinct (they must be equal),
the answers by status and problem, and the longest a request waited; it exits 1 when a value went
out twice or a request got anything but a value or a clean 503/504.
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
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from infra.adapters.aws import clients, create
from infra.adapters.postgres import migrate
from infra.run.server import die_with_parent, free_port
from infra.settings import Settings
from numerator.local import aws_environment, moto_server
from numerator.stack import EdgeStack

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
    unexplained: int = 0  # of those, the ones neither void nor unsure: 0


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


async def client_loop(
    client: httpx.AsyncClient, tally: Tally, target: int, count: int, worker: int
) -> None:
    i = worker
    while tally.handed < target:
        counter = f"soak-{i % COUNTERS}"
        i += 1
        began = time.monotonic()
        try:
            response = await client.post(f"/counters/{counter}/next", params={"count": count})
        except httpx.HTTPError as exc:
            tally.answers[f"client error {type(exc).__name__}"] += 1
            continue
        took = time.monotonic() - began
        if response.status_code == 200:
            tally.longest = max(tally.longest, took)
            for item in response.json()["values"]:
                tally.values.add((counter, item["value"]))
                tally.handed += 1
            tally.answers["200"] += 1
        else:
            kind = response.json().get("type", "?").rsplit(":", 1)[-1]
            tally.answers[f"{response.status_code} {kind}"] += 1
            if response.status_code not in (503, 504):
                raise SystemExit(f"the soak is broken: {response.status_code} {response.text}")
            await asyncio.sleep(0.1)


def say(tally: Tally, began: float, event: str) -> None:
    line = f"{time.monotonic() - began:7.1f}s  {event}"
    tally.events.append(line)
    print(line, flush=True)


async def chaos(batchers: Batchers, postgres: Any, tally: Tally, every: float, target: int) -> None:
    """Kill a batcher every `every` seconds (and start a fresh one); restart Postgres halfway."""
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
            try:
                async with EdgeStack(settings, found=clients(settings, env)) as edge:
                    transport = httpx.ASGITransport(app=edge.app())
                    async with httpx.AsyncClient(
                        transport=transport, base_url="http://127.0.0.1", timeout=60
                    ) as client:
                        for i in range(COUNTERS):
                            made = await client.post("/counters", json={"name": f"soak-{i}"})
                            made.raise_for_status()
                        began = time.monotonic()
                        loops = [
                            client_loop(client, tally, args.values, args.count, w)
                            for w in range(args.workers)
                        ]
                        await asyncio.gather(
                            *loops,
                            chaos(batchers, postgres, tally, args.kill_every, args.values),
                        )
                        say(tally, began, "done")
                        await audit(client, tally)
            finally:
                batchers.stop()
    finally:
        postgres.cleanup()
    return tally


async def audit(client: httpx.AsyncClient, tally: Tally) -> None:
    """Every counter's completeness report: its unexplained gaps (0), and what became of the
    values the soak's clients did not receive: void, abandoned (their edge gave up), or unsure
    (issued to a request of an edge that died holding it); none unexplained."""
    tally.gaps = 0
    for i in range(COUNTERS):
        name = f"soak-{i}"
        answer = await client.get(f"/counters/{name}/report")
        for _ in range(20):  # Postgres may have restarted a moment ago
            if answer.status_code != 503:
                break
            await asyncio.sleep(0.5)
            answer = await client.get(f"/counters/{name}/report")
        if answer.status_code != 200:
            raise SystemExit(f"the report of {name}: {answer.status_code} {answer.text}")
        report = answer.json()
        tally.gaps += report["unexplained_gaps"]
        received = {v for c, v in tally.values if c == name}
        if report["issued"]:
            issued = set(range(report["first"], report["last"] + 1))
            missing = issued - received
            tally.unreceived += len(missing)
            for run in report["voids"] + report["unsure_runs"]:
                missing -= set(range(run["first"], run["last"] + 1))
            tally.unexplained += len(missing)
        tally.abandoned += report["voided"].get("abandoned", 0)
        tally.unsure += report["unsure"]


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="numerator-soak-") as folder:
        began = time.monotonic()
        tally = asyncio.run(soak(args, Path(folder)))
        seconds = time.monotonic() - began
    clean = all(k == "200" or k.startswith(("503 ", "504 ")) for k in tally.answers)
    print(f"values handed out  {tally.handed:,}")
    print(f"distinct values    {len(tally.values):,}")
    print(f"answers            {dict(sorted(tally.answers.items()))}")
    print(f"longest wait       {tally.longest:.2f} s (a request that got its values)")
    print(f"batchers killed    {tally.kills} (SIGKILL), Postgres restarted once")
    print(f"unexplained gaps   {tally.gaps} (the completeness reports of every counter)")
    print(
        f"not received       {tally.unreceived:,} values: {tally.abandoned:,} void, abandoned; "
        f"{tally.unsure:,} unsure (their edge died holding their requests); "
        f"{tally.unexplained:,} unexplained"
    )
    print(f"took               {seconds:.0f} s")
    ok = tally.handed == len(tally.values) and clean and tally.gaps == tally.unexplained == 0
    print(
        "OK: every value once, every failure a clean 503/504, every value not received explained"
        if ok
        else "FAILED"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
