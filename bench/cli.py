"""`numerator bench`, `numerator bench selfcheck`, `numerator bench report`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from bench.scenario import Scenario
    from bench.variants import Variant

SCENARIOS = Path(__file__).parent / "scenarios"


def add_bench(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "bench",
        help="load tests that leave a record (JSON, CSV, Postgres, HTML)",
        description="Drive numerator with an open-model load and keep the record. "
        "`numerator bench --local --schedule 'const(200,10s)' --json run.json --csv runs.csv "
        "--html report.html` (add --compare for the baselines).",
    )
    where(parser)
    shape(parser)
    stack(parser)
    outputs(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.set_defaults(run=run)
    actions = parser.add_subparsers(title="actions", metavar="ACTION", dest="action")

    check = actions.add_parser("selfcheck", help="measure the generator's own ceiling")
    check.add_argument(
        "--max-rps", type=float, default=20000, help="the highest rate tried (default 20000)"
    )
    check.add_argument("--seconds", type=float, default=10, help="per rate tried (default 10)")
    check.add_argument(
        "--connections",
        type=int,
        default=256,
        dest="check_connections",
        help="connections to the trivial server (default 256)",
    )
    check.set_defaults(run=selfcheck)

    rebuild = actions.add_parser("report", help="rebuild the HTML report from stored runs")
    outputs(rebuild)
    rebuild.set_defaults(run=rebuild_report)


def where(parser: argparse.ArgumentParser) -> None:
    """Which service: a running one, or one the bench starts."""
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--url", help="a running numerator")
    parser.add_argument(
        "--key",
        default=os.environ.get("NUMERATOR_KEY") or None,
        help="with --url: the API key to send (admin, or read and next:… on existing counters; "
        "default $NUMERATOR_KEY)",
    )
    target.add_argument(
        "--local",
        action="store_true",
        help="start a stack (and the baselines with --compare) for the run",
    )


def shape(parser: argparse.ArgumentParser) -> None:
    """The load: a scenario, and its fields one by one."""
    parser.add_argument(
        "--scenario",
        type=Path,
        help="a YAML scenario file, or the name of one that ships with numerator "
        f"({', '.join(sorted(p.stem for p in SCENARIOS.glob('*.yaml')))})",
    )
    parser.add_argument("--description", help="a line that names the run in its record")
    parser.add_argument("--schedule", help="e.g. 'line(100,2000,30s) const(2000,1m)'")
    parser.add_argument(
        "--mix",
        choices=["hot", "uniform", "zipf"],
        help="which counter each request takes: one hot, all alike, or zipf-skewed",
    )
    parser.add_argument("--counters", type=int, help="how many counters (uniform, zipf)")
    parser.add_argument(
        "--zipf-s", type=float, dest="zipf_s", help="the zipf exponent (default 1.1)"
    )
    parser.add_argument("--count", type=int, help="values per request (?count=)")
    parser.add_argument(
        "--idempotency-share",
        type=float,
        dest="idempotency_share",
        help="share of requests with an Idempotency-Key, 0 to 1",
    )
    parser.add_argument("--connections", type=int, help="connection limit")
    parser.add_argument("--timeout", type=float, dest="timeout_s", help="per request, seconds")


def stack(parser: argparse.ArgumentParser) -> None:
    """How the stack the bench starts runs, and what runs beside it."""
    parser.add_argument("--workers", type=int, help="--local: HTTP workers")
    parser.add_argument(
        "--back-frame-ms", type=float, dest="back_frame_ms", help="--local: BACK_FRAME_MS"
    )
    parser.add_argument(
        "--aws",
        metavar="moto|URL",
        help="start numerator on the AWS path (`numerator up --aws`): moto server, or the "
        "endpoint at URL (LocalStack); --edge server or lambda says which edge",
    )
    parser.add_argument(
        "--edge",
        choices=["embedded", "server", "lambda"],
        help="the edge: embedded (--local: stream and batcher in each worker), or with --aws: "
        "server (HTTP workers, front frames) or lambda (each request through the Lambda "
        "handler)",
    )
    parser.add_argument(
        "--containers",
        type=int,
        help="--aws --edge lambda: simulated Lambda containers a worker, each one invocation at a "
        "time (LAMBDA_CONTAINERS, default 8): the local Lambda edge's capacity",
    )
    parser.add_argument("--batchers", type=int, default=1, help="--aws: batcher processes")
    parser.add_argument(
        "--database-url", help="--local: use this Postgres instead of a throwaway embedded one"
    )
    parser.add_argument(
        "--settings",
        action="append",
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="--local: run numerator once per --settings with these settings (e.g. "
        "FRAME_POLICY=auto), side by side in one report",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run the baselines: the row-lock and nextval() ones (with --local), or with "
        "--aws the embedded path and the atomic counter a serverless user would write (one "
        "DynamoDB UpdateItem ADD per request, bench/atomic.py) on the same endpoint",
    )
    parser.add_argument(
        "--trace-cost",
        action="store_true",
        help="--local or --aws: run numerator three times, tracing off, then tracing 1%% and "
        "100%% of requests (OpenTelemetry, into a trace file each: needs numerator[trace]); the "
        "report compares them and draws one request's hops",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also run the same schedule against numerator's trivial route (POST /ping): the "
        "latency this machine and generator give when no number is taken",
    )


def outputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, help="the whole run(s)")
    parser.add_argument("--csv", type=Path, help="append one summary row per run")
    parser.add_argument("--db", help="Postgres URL: one row per run in bench_runs")
    parser.add_argument("--html", type=Path, help="a self-contained report")


def scenario_path(given: Path) -> Path:
    """A path as given, or a shipped scenario by name ('hot-counter')."""
    shipped = SCENARIOS / f"{given.name.removesuffix('.yaml')}.yaml"
    return given if given.exists() or not shipped.exists() else shipped


def fail(message: str) -> NoReturn:
    print(f"numerator bench: {message}", file=sys.stderr)
    raise SystemExit(2)


def run(args: argparse.Namespace) -> None:
    from bench.errors import BenchError
    from bench.run import Outputs, execute, headline

    if args.aws:
        if args.url:
            fail("--aws starts numerator on the AWS path: not with --url")
        args.local = True
        args.edge = args.edge or "server"
    if not args.url and not args.local:
        fail("say where: --url URL (a running numerator), --local or --aws moto (start one)")
    if args.url:
        from numerator.client import BadURL, Client

        try:
            with Client(args.url) as checked:  # a URL the client refuses, refused as it would
                args.url = checked.url
        except BadURL as exc:
            fail(str(exc))
    if args.containers is not None and args.edge != "lambda":
        fail("--containers is the local Lambda edge's: with --aws moto --edge lambda")
    if args.compare and not args.local:
        fail("--compare starts the baselines itself: use it with --local")
    variants = configurations(args)
    scenario = _scenario(args)
    out = Outputs(args.json, args.csv, args.db, args.html)
    try:
        runs = execute(
            scenario,
            url=args.url,
            database_url=args.database_url,
            compare=args.compare,
            outputs=out,
            quiet=args.quiet,
            variants=variants,
            aws=args.aws,
            batchers=args.batchers,
            key=args.key,
            floor=args.floor,
        )
    except (BenchError, OSError, ValueError) as exc:
        fail(str(exc))
    print(headline(runs))
    for kind, where in (("json", out.json), ("csv", out.csv), ("db", out.db), ("html", out.html)):
        if where:
            print(f"{kind}: {where}")


def configurations(args: argparse.Namespace) -> list[Variant]:
    """numerator's configurations to run: `--settings`, or `--trace-cost`'s three."""
    from bench.variants import VariantError, parse

    if args.trace_cost:
        return traced(args)
    try:
        return parse(args.settings)
    except VariantError as exc:
        fail(str(exc))


def traced(args: argparse.Namespace) -> list[Variant]:
    """`--trace-cost`'s three configurations, their trace files in a folder of their own."""
    import tempfile

    from bench.variants import tracing_cost
    from infra.errors import SettingsError
    from infra.observe import traces
    from infra.settings import TraceSettings

    if args.settings or args.url:
        fail("--trace-cost starts numerator three ways itself: not with --settings or --url")
    try:
        traces.require(TraceSettings(trace_file="-"))
    except SettingsError as exc:
        fail(str(exc))
    folder = Path(tempfile.mkdtemp(prefix="numerator-traces-"))
    print(f"trace files: {folder}", flush=True)
    return tracing_cost(folder)


def _scenario(args: argparse.Namespace) -> Scenario:
    """The scenario file's (or the default), with what the command line says instead."""
    from bench.scenario import Scenario, ScenarioError

    try:
        scenario = Scenario.load(scenario_path(args.scenario)) if args.scenario else Scenario()
        fields = (
            "description",
            "schedule",
            "mix",
            "counters",
            "zipf_s",
            "count",
            "idempotency_share",
            "connections",
            "timeout_s",
            "workers",
            "back_frame_ms",
            "edge",
            "containers",
        )
        return scenario.override({f: getattr(args, f) for f in fields})
    except ScenarioError as exc:
        fail(str(exc))


def selfcheck(args: argparse.Namespace) -> None:
    from bench.selfcheck import check

    print(check(args.max_rps, args.seconds, args.check_connections))


def rebuild_report(args: argparse.Namespace) -> None:
    from bench import record, report

    if not args.html:
        fail("report needs --html FILE to write")
    if args.db:
        history, latest = record.read_db(args.db)
        if not latest:
            fail("no runs in bench_runs")
    elif args.json:
        latest = record.read_json(args.json)
        history = list(reversed(record.read_csv(args.csv))) if args.csv else []
    else:
        fail("report needs --db URL, or --json FILE (and --csv FILE for the comparison)")
    report.write(args.html, latest, history)
    print(f"html: {args.html}")
