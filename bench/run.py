"""One `numerator bench` invocation: start or reach the stack, drive the scenario against
numerator (and the baselines with --compare), and keep the record."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from bench import hops, local, record, report, waterfall
from bench.collect import Collector, Processes, aws_calls
from bench.errors import BenchError
from bench.headroom import headroom
from bench.http import HttpPool
from bench.load import Load, Result, drive
from bench.scenario import Scenario
from bench.schedule import Schedule
from bench.variants import Variant
from bench.verdict import verdict
from infra import __version__
from infra.run import loop
from infra.run.embedded import Postgres

FLOOR = "floor (/ping)"  # the trivial route: no number taken, the same server and generator


@dataclass
class Outputs:
    json: Path | None = None
    csv: Path | None = None
    db: str | None = None
    html: Path | None = None


class Progress:
    """A line a second: elapsed, offered and achieved rps, the worst one-second p99 of the last
    5 s (an early warning: the summary's p99 is over the whole run, and lower unless every second
    was as bad), errors."""

    def __init__(self, target: str, schedule: Schedule, quiet: bool) -> None:
        self.target, self.schedule, self.quiet = target, schedule, quiet
        self.seconds = schedule.seconds
        self.last_ok = 0
        self.last_t = 0.0
        self.tty = sys.stderr.isatty()

    def __call__(self, elapsed: float, out: Result) -> None:
        if self.quiet:
            return
        span = max(elapsed - self.last_t, 1e-9)
        achieved = (out.ok - self.last_ok) / span
        offered = self.schedule.rate_at(elapsed - span / 2)
        self.last_ok, self.last_t = out.ok, elapsed
        recent = [s for at, s in out.per_second.items() if elapsed - 5 <= at <= elapsed]
        p99 = max(
            (
                s.latency.get_value_at_percentile(99) / 1000
                for s in recent
                if s.latency.get_total_count()
            ),
            default=0.0,
        )
        errors = out.bad + sum(out.errors.values())
        line = (
            f"[{self.target}] {elapsed:5.1f}/{self.seconds:.0f}s  offered {offered:7.0f}/s  "
            f"achieved {achieved:7.0f}/s  p99 (worst second, last 5 s) {p99:7.1f} ms  "
            f"errors {errors}  "
            f"missed {sum(s.missed for s in out.per_second.values())}"
        )
        print(
            ("\r" + line) if self.tty else line,
            end="" if self.tty else "\n",
            file=sys.stderr,
            flush=True,
        )


async def measure(
    url: str,
    load: Load,
    pids: list[int],
    progress: Progress,
    others: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[Result, Collector]:
    client = HttpPool(url, load.connections, headers)
    collector = Collector(url, Processes(pids) if pids else None, others or [], headers or {})
    stop = asyncio.Event()
    scraping = asyncio.create_task(collector.run(stop))
    await asyncio.sleep(0.2)  # the collector's first scrape: the totals before the load
    began = time.monotonic()
    try:
        result = await drive(client, load, progress)
    finally:
        client.close()
        stop.set()
        await scraping
    for sample in collector.samples:  # a rate belongs to the middle of the span it covers
        sample["t"] = round(sample["t"] - sample["span_s"] / 2 - began, 3)
    if progress.tty and not progress.quiet:
        print(file=sys.stderr)
    return result, collector


def execute(
    scenario: Scenario,
    *,
    url: str | None,
    database_url: str | None,
    compare: bool,
    outputs: Outputs,
    quiet: bool = False,
    variants: list[Variant] | None = None,
    aws: str | None = None,
    batchers: int = 1,
    key: str | None = None,
    floor: bool = False,
) -> list[dict[str, Any]]:
    """Run the scenario; return the run records: numerator once per configuration (`variants`,
    `--settings`), then any baselines. With `aws` (moto, or an endpoint URL) numerator runs on
    the AWS path with the scenario's edge (server or lambda), and `compare` runs the
    embedded path beside it instead of the baselines. `key`: the API key for a service at
    `url` (scopes admin, or read and next:… for counters that exist). `floor`: last, the same
    schedule against the trivial route (POST /ping) of numerator as configured by the first
    `--settings`: what this machine and generator give when no number is taken."""
    run_id = uuid.uuid4().hex[:12]
    started = datetime.now(UTC).isoformat(timespec="seconds")
    load = scenario.load_plan()
    variants = variants or [Variant({})]
    if url and variants[0].env:
        raise BenchError("--settings configures a service the bench starts: use it with --local")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    runs = []
    with ExitStack() as stack:
        db = None if url else stack.enter_context(local.database(database_url))
        for name, kind, env in targets(scenario, variants, aws, compare, floor):
            with ExitStack() as serving:
                target, mode = serving.enter_context(
                    started_target(scenario, name, kind, env, url, db, aws, batchers)
                )
                local.create_counters(target.url, load.mix.names(), headers)
                progress = Progress(name, load.schedule, quiet)
                pids = target.pids + (db.pids if db else [])
                sent = replace(load, path="/ping") if name == FLOOR else load
                result, collector = loop.run(
                    partial(measure, target.url, sent, pids, progress, target.others, headers)
                )
            runs.append(
                record.build(
                    run_id=run_id,
                    started_at=started,
                    description=scenario.description,
                    target=name,
                    mode=mode,
                    scenario=scenario.to_json(),
                    settings=settings_of(target, collector.info),
                    result=result,
                    service=collector.summary(),
                    service_seconds=collector.samples,
                    version=__version__,
                )
            )
    save(runs, outputs)
    return runs


def traced(env: dict[str, str]) -> dict[str, Any]:
    """For a run whose service traced (TRACE_FILE), its record's `trace`: how many trace spans
    and requests its file holds, and one request's hops (bench/waterfall.py) for the report."""
    if not env.get("TRACE_FILE"):
        return {}
    path = Path(env["TRACE_FILE"])
    spans = waterfall.read(path) if path.exists() else []
    requests = sum(span["name"] == waterfall.NEXT for span in spans)
    hops = waterfall.hops(spans)
    return {"trace": {"file": str(path), "spans": len(spans), "requests": requests, "hops": hops}}


def targets(
    scenario: Scenario, variants: list[Variant], aws: str | None, compare: bool, floor: bool
) -> list[tuple[str, str, dict[str, str]]]:
    """What the run measures, in order, as (name, kind, environment): numerator once per
    variant, then the baselines (or with `aws`, the embedded path), then the floor."""
    # The generator is one address standing for many clients: the per-client limit on
    # Idempotency-Keys (100/s by default) would refuse a scenario's share of them as one client's.
    base = {"BACK_FRAME_MS": f"{scenario.back_frame_ms:g}", "IDEMPOTENCY_KEYS_PER_S": "1000000"}
    if aws and scenario.edge == "embedded":
        raise BenchError("--aws runs the AWS path: --edge server (front frames) or lambda")
    if not aws and scenario.edge != "embedded":
        raise BenchError(f"--edge {scenario.edge} is the AWS path's: add --aws moto (or a URL)")
    if aws and scenario.edge == "lambda":
        base["LAMBDA_CONTAINERS"] = str(scenario.containers)
    if aws:
        tag = f"numerator-aws-{scenario.edge}"
        found = [(v.name.replace("numerator", tag, 1), "aws", {**base, **v.env}) for v in variants]
        if compare:
            found.append(("numerator-embedded", "numerator", base))
            found.append(("baseline-atomic", "atomic", base))
    else:
        found = [(v.name, "numerator", {**base, **v.env}) for v in variants]
        if compare:
            found += [(name, name, base) for name in ("baseline-rowlock", "baseline-sequence")]
    if floor:
        found.append((FLOOR, "aws" if aws else "numerator", {**base, **variants[0].env}))
    return found


@contextmanager
def started_target(
    scenario: Scenario,
    name: str,
    kind: str,
    env: dict[str, str],
    url: str | None,
    db: Postgres | None,
    aws: str | None,
    batchers: int,
) -> Iterator[tuple[local.Target, str]]:
    """The target to measure, started here unless it runs at `url`; and its mode, as the
    record says it."""
    if url:
        settings: dict[str, object] = {"workers": None, "back_frame_ms": None, "shards": None}
        yield local.Target(name, url, [], settings), "remote"
        return
    assert db is not None
    if kind == "atomic":
        assert aws is not None
        with local.serve_atomic(aws, env) as target:
            yield target, "aws-atomic"
        return
    if kind == "aws":
        assert aws is not None
        with local.serve_aws(db, aws, scenario.edge, scenario.workers, batchers, env) as target:
            target.name = name
            yield target, f"aws-{scenario.edge}"
        return
    with local.serve(kind, db, scenario.workers, env) as target:
        target.name = name
        yield target, "embedded"


def settings_of(target: local.Target, info: dict[str, str]) -> dict[str, Any]:
    """What the bench set, completed by what the service reports of itself (numerator_info):
    a remote run learns its frame delay and workers from the service."""
    settings: dict[str, Any] = dict(target.settings)
    for key in ("back_frame_ms", "workers", "shards"):
        if settings.get(key) is None and key in info:
            settings[key] = float(info[key]) if key == "back_frame_ms" else int(info[key])
    if "version" in info:
        settings["service_version"] = info["version"]
    if "mode" in info:
        settings["service_mode"] = info["mode"]
    return settings


def headline(runs: list[dict[str, Any]]) -> str:
    warnings = []
    for run in runs:
        s = run["summary"]
        if s["missed_sends"]:
            warnings.append(
                f"warning: [{s['target']}] the generator sent {s['missed_sends']} requests more "
                f"than 10 ms late (worst {run['client']['worst_late_ms']:.0f} ms; generator CPU "
                f"{s['generator_cpu_pct']:.0f}%): latencies count from the scheduled time, but "
                "the offered rate was not fully met; see `numerator bench selfcheck`"
            )
    said = "".join(f"\n[{run['summary']['target']}] {verdict(run).line()}" for run in runs)
    return (
        table(runs)
        + frames(runs)
        + calls(runs)
        + sweep(runs)
        + said
        + ("\n" + "\n".join(warnings) if warnings else "")
    )


def frames(runs: list[dict[str, Any]]) -> str:
    """What requests per transaction means for each run, and the room Postgres had left."""
    lines = []
    for run in runs:
        found = headroom(run)
        if found:
            lines += [f"[{run['summary']['target']}] {line}" for line in found.lines()]
    return "\n" + "\n".join(lines) if lines else ""


def calls(runs: list[dict[str, Any]]) -> str:
    """The AWS path's bill: AWS calls per request, by API call, for the runs that made any."""
    lines = []
    for run in runs:
        totals = run["service"]["totals"]
        requests = totals.get("requests") or 0
        made = aws_calls(totals)
        if not made or not requests:
            continue
        kinds = ", ".join(f"{k} {v / requests:.3f}" for k, v in sorted(made.items()))
        put, pushed = totals.get("records_put", 0), totals.get("replies_pushed", 0)
        took = f" ({pushed / put:.0%} of their replies pushed)" if put and pushed else ""
        lines.append(
            f"{run['summary']['target']}: {sum(made.values()) / requests:.3f} AWS calls per "
            f"request ({kinds}); {put / requests:.3f} records put per "
            f"request{took}; throttled {totals.get('throttles', 0):.0f}, takeovers "
            f"{totals.get('takeovers', 0):.0f}, republished {totals.get('republished', 0):.0f}"
        )
        tiers = totals.get("cpu_pct_by_tier") or {}
        if tiers:
            lines.append(
                "  CPU % by tier: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(tiers.items()))
            )
        if totals.get("hops"):
            lines.append(hops.line(totals["hops"]))
    return "\n\n" + "\n".join(lines) if lines else ""


def save(runs: list[dict[str, Any]], outputs: Outputs) -> None:
    for run in runs:  # read once its processes stopped, their trace spans flushed
        run.update(traced(run["settings"].get("environment") or {}))
    if outputs.json:
        record.write_json(outputs.json, runs)
    if outputs.csv:
        record.append_csv(outputs.csv, runs)
    if outputs.db:
        record.insert_db(outputs.db, runs)
    if outputs.html:
        history: list[dict[str, Any]] = []
        if outputs.db:
            history, _ = record.read_db(outputs.db)
        elif outputs.csv:
            history = list(reversed(record.read_csv(outputs.csv)))
        report.write(outputs.html, runs, history)


def table(runs: list[dict[str, Any]]) -> str:
    width = max(18, *(len(run["summary"]["target"]) for run in runs))
    lines = [
        f"{'target':<{width}} {'rps':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
        f"{'non-2xx':>8} {'errors':>7} {'missed':>7} {'req/txn':>8}"
    ]
    for run in runs:
        s = run["summary"]
        per_txn = f"{s['requests_per_txn']:.1f}" if s["requests_per_txn"] else "-"
        lines.append(
            f"{s['target']:<{width}} {s['rps_mean']:>8.0f} {s['latency_p50_ms']:>8.2f} "
            f"{s['latency_p95_ms']:>8.2f} {s['latency_p99_ms']:>8.2f} {s['bad_responses']:>8} "
            f"{s['errors']:>7} {s['missed_sends']:>7} {per_txn:>8}"
        )
    lines.append(
        "(percentiles over all of a run's requests; the lines while it ran showed the worst "
        "second's p99 of the last 5 s)"
    )
    return "\n".join(lines)


def sweep(runs: list[dict[str, Any]]) -> str:
    """Each step of a sweep, the runs side by side: p50 / p99 ms and Postgres transactions/s."""
    if not any(run.get("steps") for run in runs):
        return ""
    lines = ["", "steps: p50 / p99 ms, Postgres transactions per second, achieved rps"]
    for run in runs:
        lines.append(run["summary"]["target"])
        for step in run.get("steps") or []:
            txn = step["transactions_per_s"]
            lines.append(
                f"  {step['offered_rps']:>8,.0f} rps offered: {step['latency_p50_ms']:>7.2f} / "
                f"{step['latency_p99_ms']:>7.2f} ms  {'-' if txn is None else f'{txn:,.0f}':>6} "
                f"txn/s  {step['achieved_rps']:>8,.0f} achieved"
                + (
                    f"  {step['bad_responses'] + step['errors']} failed"
                    if step["bad_responses"] or step["errors"]
                    else ""
                )
            )
    return "\n".join(lines)
