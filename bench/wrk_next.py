"""/next on one hot counter and on many counters, against a trivial route on the same server,
driven by wrk.

    python -m bench.wrk_next --connections 64,256,1024 --duration 10 --counters 1000
    python -m bench.wrk_next --baselines 10 --connections 64 --duration 5

Starts numerator on a throwaway embedded Postgres (the service's own settings, e.g.
FRAME_POLICY or BACK_FRAME_MS, are taken from the environment), creates the counters, and for
each concurrency runs wrk on POST /ping (the trivial route), POST /counters/hot/next, and POST
/next on a counter drawn uniformly from `--counters` of them (0 leaves that case out). It prints
the rates, their ratios to the trivial route, the many-counter rate as a share of the hot one, and
requests per Postgres transaction from /metrics.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics

import httpx
import psutil

from bench import local, wrk
from bench.collect import totals
from bench.scrape import scrape
from bench.variants import NOT_HERE, SETTINGS


def parser() -> argparse.ArgumentParser:
    """The options of `python -m bench.wrk_next`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--connections", default="64,256,1024", help="open connections, one table line each"
    )
    parser.add_argument("--duration", type=float, default=10, help="seconds per measurement")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument("--workers", type=int, default=1, help="service worker processes")
    parser.add_argument("--counters", type=int, default=1000, help="the many-counters case")
    parser.add_argument(
        "--against",
        metavar="TREE",
        help="instead: /next on the hot counter (and /ping) from this tree and from TREE, a "
        "checkout of another version (git worktree add TREE REV), both served at once on one "
        "Postgres, in alternating rounds (--rounds): the A/B of a change",
    )
    parser.add_argument("--rounds", type=int, default=10, help="rounds of --against")
    parser.add_argument(
        "--baselines",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="instead: /next on the hot counter from numerator and from the baselines "
        "(nextval() per value, and a row lock per request) served at once on one Postgres, "
        "driven in turn for ROUNDS rounds: numerator's rate as a multiple of each baseline's",
    )
    parser.add_argument(
        "--keys",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="instead: /next with API keys off (AUTH=none) and on (AUTH=keys, a next:* key "
        "sent with each request), alternating for ROUNDS rounds",
    )
    return parser


def main() -> None:
    args = parser().parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed: apt-get install wrk")
    if args.keys:
        keys_cost(args)
        return
    if args.baselines:
        baselines(args)
        return
    if args.against:
        against(args)
        return
    # The service inherits this environment (bench.local.serve); these are the settings in it.
    env = {k: v for k, v in os.environ.items() if k in SETTINGS and k not in NOT_HERE}
    many = [f"c{i}" for i in range(args.counters)]
    with (
        local.database() as db,
        local.serve("numerator", db, args.workers, {}) as target,
    ):
        base = target.url
        local.create_counters(base, ["hot", *many])
        wrk.run(base + "/ping", 64, 2, args.threads)  # warm up
        wrk.run(base + "/counters/hot/next", 64, 2, args.threads)
        if many:
            wrk.run(base, 64, 2, args.threads, many)
        shown = " ".join(f"{k}={v}" for k, v in env.items()) or "defaults"
        print(
            f"{shown} workers={args.workers} "
            f"wrk -t{args.threads}, {args.duration:g}s each, POST, loopback"
        )
        table(base, args, many)
        if args.workers > 1:
            print("(req/txn is read from whichever worker answered /metrics)")


def table(base: str, args: argparse.Namespace, many: list[str]) -> None:
    """One line per connection count: the trivial route, then /next on the hot counter and on
    the many counters, each as a rate, a ratio to the trivial route and requests per frame."""
    print(
        f"{'conns':>6} {'trivial rps':>12} {'hot rps':>9} {'ratio':>6} {'req/txn':>8}"
        + (f" {'many rps':>9} {'ratio':>6} {'req/txn':>8} {'many/hot':>8}" if many else "")
    )

    def measured(connections: int, counters: list[str] | None) -> tuple[float, float]:
        before = totals(scrape(base))
        path = base if counters else base + "/counters/hot/next"
        rate = wrk.run(path, connections, args.duration, args.threads, counters)
        after = totals(scrape(base))
        frames = after["transactions"] - before["transactions"]
        per_txn = (after["requests"] - before["requests"]) / frames if frames else float("nan")
        return rate, per_txn

    for connections in (int(c) for c in args.connections.split(",")):
        trivial = wrk.run(base + "/ping", connections, args.duration, args.threads)
        hot, hot_per_txn = measured(connections, None)
        line = f"{connections:>6} {trivial:>12,.0f} {hot:>9,.0f} {hot / trivial:>6.2f} "
        line += f"{hot_per_txn:>8.1f}"
        if many:
            spread, spread_per_txn = measured(connections, many)
            line += f" {spread:>9,.0f} {spread / trivial:>6.2f} {spread_per_txn:>8.1f}"
            line += f" {spread / hot:>8.2f}"
        print(line, flush=True)


def keys_cost(args: argparse.Namespace) -> None:
    """/next on one hot counter from two services on one Postgres, one without keys and one
    checking a key on every request, driven in turn: the rates and their ratio per round."""
    connections = [int(c) for c in args.connections.split(",")]
    with (
        local.database() as db,
        local.serve("numerator", db, args.workers, {"AUTH": "none"}) as off,
        local.serve("numerator", db, args.workers, {"AUTH": "keys"}) as on,
    ):
        local.create_counters(off.url, ["hot"])
        admin = httpx.post(on.url + "/keys", json={"name": "admin", "scopes": ["admin"]})
        admin.raise_for_status()
        sent = {"Authorization": "Bearer " + admin.json()["secret"]}
        made = httpx.post(
            on.url + "/keys", json={"name": "bench", "scopes": ["next:*"]}, headers=sent
        )
        made.raise_for_status()
        header = {"Authorization": "Bearer " + made.json()["secret"]}
        for url, headers in ((off.url, {}), (on.url, header)):  # warm up
            wrk.run(url + "/counters/hot/next", 64, 2, args.threads, headers=headers)
        print(
            f"API keys off (AUTH=none) and on (AUTH=keys, next:* key), workers={args.workers} "
            f"wrk -t{args.threads}, {args.duration:g}s each, POST /counters/hot/next, loopback"
        )
        print(f"{'round':>5} {'conns':>6} {'off rps':>9} {'on rps':>9} {'on/off':>7}")
        for round_ in range(1, args.keys + 1):
            for c in connections:
                rates = []
                for url, headers in ((off.url, {}), (on.url, header)):
                    path = url + "/counters/hot/next"
                    rates.append(wrk.run(path, c, args.duration, args.threads, headers=headers))
                print(
                    f"{round_:>5} {c:>6} {rates[0]:>9,.0f} {rates[1]:>9,.0f} "
                    f"{rates[1] / rates[0]:>7.2f}",
                    flush=True,
                )


BASELINES = ("sequence", "rowlock")


def baselines(args: argparse.Namespace) -> None:
    """/next on one hot counter from numerator and from each baseline, served at once on one
    Postgres and driven in turn, round by round (who goes first turns too): each rate, and
    numerator's as a multiple of each baseline's; then per baseline the multiple's median, mean
    and range. `numerator bench --compare` measures the same once, one after the other; on a shared
    machine the rounds move by more than that tells apart."""
    connections = [int(c) for c in args.connections.split(",")]
    with contextlib.ExitStack() as stack:
        db = stack.enter_context(local.database())
        served = {"numerator": stack.enter_context(local.serve("numerator", db, args.workers, {}))}
        for name in BASELINES:
            served[name] = stack.enter_context(
                local.serve(f"baseline-{name}", db, args.workers, {})
            )
        for target in served.values():
            local.create_counters(target.url, ["hot"])
            wrk.run(target.url + "/counters/hot/next", 64, 2, args.threads)  # warm up
        print(
            f"numerator and the baselines, workers={args.workers} wrk -t{args.threads}, "
            f"{args.duration:g}s each, POST /counters/hot/next, loopback"
        )
        names = list(served)
        print(f"{'round':>5} {'conns':>6} " + " ".join(f"{n:>10}" for n in names) + "  multiples")
        multiples: dict[tuple[int, str], list[float]] = {}
        for round_ in range(1, args.baselines + 1):
            for c in connections:
                order = names[round_ % len(names) :] + names[: round_ % len(names)]
                rates = {
                    n: wrk.run(served[n].url + "/counters/hot/next", c, args.duration, args.threads)
                    for n in order
                }
                times = {n: rates["numerator"] / rates[n] for n in BASELINES}
                for n, x in times.items():
                    multiples.setdefault((c, n), []).append(x)
                print(
                    f"{round_:>5} {c:>6} "
                    + " ".join(f"{rates[n]:>10,.0f}" for n in names)
                    + "  "
                    + ", ".join(f"{x:.2f}x {n}" for n, x in times.items()),
                    flush=True,
                )
    for (c, name), found in multiples.items():
        found.sort()
        print(
            f"{c:>6} numerator / {name}: median {statistics.median(found):.2f}x, mean "
            f"{statistics.mean(found):.2f}x, range {found[0]:.2f}-{found[-1]:.2f}"
        )


def against(args: argparse.Namespace) -> None:
    """/ping and /next on one hot counter from this tree (B) and another (A), served at once on
    one Postgres and driven in turn, round by round: each rate, B's ratio to A's, and the CPU
    each service's processes spent per request (Postgres's own not counted), which a neighbour's
    load on a shared machine moves less than it moves the rates. Then, per tree, /next's rate
    as a share of /ping's: the yardstick of the hot path."""
    connections = [int(c) for c in args.connections.split(",")]
    with (
        local.database() as db,
        local.serve("numerator", db, args.workers, {}, tree=args.against) as a,
        local.serve("numerator", db, args.workers, {}) as b,
    ):
        local.create_counters(a.url, ["hot"])
        for url in (a.url, b.url):  # warm up
            wrk.run(url + "/counters/hot/next", 64, 2, args.threads)
        print(
            f"A: {args.against}, B: this tree; workers={args.workers} wrk -t{args.threads}, "
            f"{args.duration:g}s each, POST, loopback; µs: CPU per request"
        )
        print(
            f"{'round':>5} {'conns':>6} {'route':>6} {'A rps':>9} {'B rps':>9} {'B/A':>6} "
            f"{'A µs':>6} {'B µs':>6}"
        )
        rates: dict[tuple[str, int, str], list[float]] = {}
        spent: dict[tuple[str, int, str], list[float]] = {}
        for round_ in range(1, args.rounds + 1):
            for c in connections:
                for route, path in (("next", "/counters/hot/next"), ("ping", "/ping")):
                    order = (a, b) if round_ % 2 else (b, a)  # who goes first alternates too
                    for served in order:
                        before = cpu(served.pids)
                        rate = wrk.run(served.url + path, c, args.duration, args.threads)
                        used = cpu(served.pids) - before
                        name = "A" if served is a else "B"
                        rates.setdefault((name, c, route), []).append(rate)
                        spent.setdefault((name, c, route), []).append(
                            used / (rate * args.duration) * 1e6
                        )
                    key_a, key_b = ("A", c, route), ("B", c, route)
                    print(
                        f"{round_:>5} {c:>6} {route:>6} {rates[key_a][-1]:>9,.0f} "
                        f"{rates[key_b][-1]:>9,.0f} {rates[key_b][-1] / rates[key_a][-1]:>6.2f} "
                        f"{spent[key_a][-1]:>6.0f} {spent[key_b][-1]:>6.0f}",
                        flush=True,
                    )
    summary(connections, rates, spent)


def summary(
    connections: list[int],
    rates: dict[tuple[str, int, str], list[float]],
    spent: dict[tuple[str, int, str], list[float]],
) -> None:
    """`against`'s last lines: per route, B's rate against A's and each tree's CPU per request;
    per tree, /next's rate as a share of /ping's."""
    for c in connections:
        for route in ("next", "ping"):
            found = sorted(
                y / x for x, y in zip(rates["A", c, route], rates["B", c, route], strict=True)
            )
            us = [statistics.mean(spent[t, c, route]) for t in ("A", "B")]
            print(
                f"{c:>6} {route:>6}: B/A mean {statistics.mean(found):.3f}, median "
                f"{statistics.median(found):.3f}, range {found[0]:.2f}-{found[-1]:.2f}; "
                f"CPU per request A {us[0]:.0f} µs, B {us[1]:.0f} µs"
            )
        for t in ("A", "B"):
            shares = sorted(
                n / p for n, p in zip(rates[t, c, "next"], rates[t, c, "ping"], strict=True)
            )
            print(
                f"{c:>6} {t}: next/ping mean {statistics.mean(shares):.3f}, median "
                f"{statistics.median(shares):.3f}, range {shares[0]:.2f}-{shares[-1]:.2f}"
            )


def cpu(pids: list[int]) -> float:
    """CPU seconds (user and system) that these processes and their children have used."""
    total = 0.0
    for pid in pids:
        root = psutil.Process(pid)
        for process in (root, *root.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += times.user + times.system
    return total


if __name__ == "__main__":
    main()
