"""The commands and their options, and where each one's code lives.

A command names its code as 'module:function', imported when it runs: `numerator --version`
and `numerator next` load the HTTP client at most, not Postgres, boto3 or the bench.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from numerator import __version__

DEFAULT_URL = "http://127.0.0.1:8080"  # numerator.client.DEFAULT_URL, without importing httpx
PERIOD_HELP = "YYYY, YYYY-MM or YYYY-MM-DD (default: the current one)"
SCOPES_HELP = (
    "admin (everything), read (the GET routes) or next:PATTERN (take values of the counters "
    "whose name matches the glob, e.g. next:inv-*); repeat for several"
)
Run = Callable[[argparse.Namespace], None]


def later(target: str) -> Run:
    """The function `target` ('module:function'), imported when the command runs."""
    module, name = target.split(":")

    def run(args: argparse.Namespace) -> None:
        getattr(importlib.import_module(module), name)(args)

    return run


def build_parser() -> argparse.ArgumentParser:
    from bench.cli import add_bench  # its own imports wait for `numerator bench` to run

    parser = argparse.ArgumentParser(
        prog="numerator", description="Unique, increasing numbers from named counters."
    )
    parser.add_argument("--version", action="version", version=f"numerator {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    add_up(commands)
    add_serve(commands)
    add_batcher(commands)
    add_migrate(commands)
    add_aws(commands)
    add_invoke(commands)
    add_lambda_image(commands)
    add_sam_local(commands)
    counters = add_counters(commands)
    add_next(commands)
    add_keys(commands)
    add_ledger(commands, counters)
    add_bench(commands)
    add_plan(commands)
    add_monitoring(commands)
    return parser


def add_monitoring(commands: Any) -> None:
    monitoring = commands.add_parser(
        "monitoring",
        help="write the Prometheus rules, the Grafana dashboard and their runbook to a folder",
        description="Write rules.yml (alerts and SLO recording rules), dashboard.json (Grafana) "
        "and docs/operations.md and docs/runbook.md (what each alert means; the rules link "
        "there) into FOLDER, from the installed package.",
    )
    monitoring.add_argument("folder", type=Path, metavar="FOLDER", help="where to write them")
    monitoring.set_defaults(run=later("numerator.shipped:run"))


def add_up(commands: Any) -> None:
    up = commands.add_parser("up", help="run the service on this machine (embedded Postgres)")
    serving(up)
    up.add_argument(
        "--data-dir",
        type=Path,
        help="where counter state is kept (default $XDG_DATA_HOME/numerator, else "
        "~/.local/share/numerator)",
    )
    up.add_argument(
        "--ephemeral", action="store_true", help="use a throwaway database, deleted on exit"
    )
    up.add_argument(
        "--aws",
        metavar="moto|URL",
        help="run the AWS path: Kinesis and DynamoDB from moto server started here (moto), or "
        "from the endpoint at URL (LocalStack: http://localhost:4566); a batcher process beside",
    )
    up.add_argument(
        "--edge",
        choices=["server", "lambda"],
        default="server",
        help="with --aws: HTTP workers (server), or each request as an API Gateway event through "
        "the Lambda handler in process (lambda)",
    )
    up.add_argument("--batchers", type=int, default=1, help="with --aws: batcher processes")
    up.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        help="append every process's OpenTelemetry trace spans to FILE, a JSON line each "
        "(TRACE_FILE; needs numerator[trace]); OTEL_EXPORTER_OTLP_ENDPOINT sends them to a "
        "collector instead",
    )
    up.set_defaults(run=later("numerator.serving:run_up"))


def add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve", help="run HTTP workers against an existing Postgres (MODE=aws: the AWS edge)"
    )
    serving(serve)
    serve.add_argument(
        "--aws",
        nargs="?",
        const="aws",
        metavar="URL",
        help="the AWS path's edge (MODE=aws, front frames): on AWS itself, or on the endpoint at "
        "URL (LocalStack, moto server); the batchers run apart (`numerator batcher`)",
    )
    serve.set_defaults(run=later("numerator.serving:run_serve"))


BATCHER_PORT = 8081
"""`numerator batcher`'s /healthz and /metrics; docs/operations.md scrapes it (a test holds it)."""


def add_batcher(commands: Any) -> None:
    batcher = commands.add_parser(
        "batcher", help="run the batcher alone: Kinesis in, Postgres, DynamoDB out (MODE=aws)"
    )
    batcher.add_argument(
        "--host", default="127.0.0.1", help="the address of /healthz and /metrics (%(default)s)"
    )
    batcher.add_argument(
        "--port",
        type=int,
        default=BATCHER_PORT,
        help="the port of /healthz and /metrics (%(default)s; `up --aws` picks free ones and "
        "prints them)",
    )
    database(batcher)
    batcher.add_argument(
        "--owner",
        default=None,
        help="the name this batcher holds shard leases under (default: a new random one). "
        "A batcher started under the name of one that is certainly dead takes its shards at "
        "once instead of after LEASE_TTL_S: how `up` restarts a batcher it saw die. Never "
        "give two running batchers one name",
    )
    hub = "the batcher of the workers at this unix socket (HUB; `up --workers N` runs one)"
    batcher.add_argument("--hub", metavar="SOCKET", help=hub)
    batcher.set_defaults(run=later("numerator.serving:run_batcher"))


def add_migrate(commands: Any) -> None:
    migrating = commands.add_parser(
        "migrate",
        help="apply the schema to Postgres and exit (the deployment's one-off task)",
        description="Apply the migrations not yet applied to the Postgres that --database-url, "
        "DATABASE_URL (a URL or an RDS secret's JSON) or DATABASE_SECRET_ARN names; safe to "
        "run again, and beside running batchers.",
    )
    database(migrating)
    migrating.set_defaults(run=later("numerator.serving:run_migrate"))


def add_aws(commands: Any) -> None:
    aws = commands.add_parser("aws", help="AWS resources")
    actions = aws.add_subparsers(title="actions", metavar="ACTION")
    init = actions.add_parser(
        "init", help="create the Kinesis stream and the DynamoDB reply table (idempotent)"
    )
    init.add_argument(
        "--endpoint", help="e.g. http://localhost:4566 (default: $AWS_ENDPOINT_URL, else AWS)"
    )
    init.add_argument("--shards", type=int, help="shards of a new stream (default: $SHARDS or 1)")
    init.set_defaults(run=later("numerator.serving:run_aws_init"))
    push = actions.add_parser(
        "push-key",
        help="rotate the push key in its Secrets Manager secret, one step at a time "
        "(docs/operations.md)",
    )
    push.add_argument(
        "step",
        choices=["stage", "promote", "retire"],
        help="stage: a new key, accepted but not yet used; promote: signed with, the old one "
        "still accepted; retire: the old one refused. Wait PUSH_KEY_REFRESH_S between steps",
    )
    push.add_argument("--secret", required=True, help="the secret's ARN (PUSH_KEY_SECRET_ARN)")
    push.add_argument(
        "--endpoint", help="e.g. http://localhost:4566 (default: $AWS_ENDPOINT_URL, else AWS)"
    )
    push.set_defaults(run=later("numerator.pushkey:run"))


def add_invoke(commands: Any) -> None:
    invoke = commands.add_parser(
        "invoke",
        help="API Gateway events through the Lambda handler, without Docker",
        description="Send each EVENT (an API Gateway or function URL event file, e.g. "
        "events/http-api-next.json) "
        "in order to functions.handler.handler in one container, in a child Python, and print "
        "each answer as a line of JSON. The function's environment is this one's (MODE=aws, "
        "DATABASE_URL, STREAM_NAME, REPLY_TABLE, AWS_ENDPOINT_URL, …).",
    )
    invoke.add_argument(
        "events", nargs="+", metavar="EVENT", help="an API Gateway or function URL event file"
    )
    invoke.add_argument(
        "--build",
        type=Path,
        metavar="DIR",
        help="the function folder `sam build` made (.aws-sam/build/EdgeFunction): run its "
        "handler from there alone, by the runtime's Python (default: this project's handler)",
    )
    invoke.add_argument(
        "--python",
        metavar="PATH",
        help="the Python to run it (default: python3.12 on PATH with --build, else this one)",
    )
    invoke.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds each invocation may take, as the function's Timeout (default 30)",
    )
    invoke.set_defaults(run=later("numerator.invoke:run_invoke"))


def add_lambda_image(commands: Any) -> None:
    image = commands.add_parser(
        "lambda-image",
        help="build a stand-in for AWS's Lambda Python image, for sam local without a registry",
        description="Build public.ecr.aws/lambda/python:3.12-<this CPU> from Debian's packages "
        "(debootstrap) and PyPI (awslambdaric) with this machine's Python 3.12, for `sam local "
        "invoke` and `sam local start-api --skip-pull-image`; an image of that tag built from "
        "the same inputs is reused. Needs root, debootstrap and a Docker daemon. Where AWS's "
        "images can be pulled, none of this is needed.",
    )
    image.add_argument("--python", metavar="PATH", help="the Python 3.12 to place at /var/lang")
    image.add_argument("--force", action="store_true", help="build even if the image is current")
    image.set_defaults(run=later("numerator.lambdaimage:run_lambda_image"))


def add_sam_local(commands: Any) -> None:
    sam = commands.add_parser(
        "sam-local",
        help="the edge function in a Lambda container: sam local start-api or invoke, one command",
        description="Build or reuse the Lambda base image (numerator lambda-image), run `sam "
        "build` for this machine's CPU, start `numerator up --aws moto` on Postgres with both "
        "relayed to the Docker bridge's address, put the database URL in moto's Secrets Manager "
        "and write the function's --env-vars file, then run `sam local start-api` until Ctrl-C "
        "or `sam local invoke` of each EVENT in turn. Run it in a clone of numerator (it builds "
        "template.yaml). Needs a Docker daemon, a Python 3.12 and the AWS SAM CLI "
        "(pip install 'numerator[aws-local]').",
    )
    actions = sam.add_subparsers(title="actions", metavar="ACTION", dest="action", required=True)
    start = actions.add_parser(
        "start-api", help="sam local start-api: SAM's API Gateway in front of the function"
    )
    start.add_argument("--port", type=int, default=3000, help="its port (%(default)s)")
    start.add_argument(
        "--authorizer",
        choices=["NONE", "IAM", "JWT"],
        default="NONE",
        help="the template's Authorizer (%(default)s: numerator's own keys at the edge, "
        "loopback callers served while none exists; SAM checks neither IAM nor JWT)",
    )
    invoke = actions.add_parser(
        "invoke",
        help="sam local invoke of each event file in turn (a counter's create first)",
        description="Each EVENT through `sam local invoke`, a container each, in the order "
        "given; each answer printed as a line of JSON. Joins the stack of a sam-local "
        "start-api running from the same folder, or starts its own.",
    )
    invoke.add_argument("events", nargs="+", type=Path, metavar="EVENT", help="an event file")
    for action in (start, invoke):
        action.add_argument(
            "--template", type=Path, default=Path("template.yaml"), help="(%(default)s)"
        )
        action.add_argument(
            "--pull",
            action="store_true",
            help="let sam pull AWS's Lambda image instead of building the stand-in",
        )
        action.add_argument(
            "--database-url", help="a Postgres of yours instead of the embedded one"
        )
        action.add_argument(
            "--data-dir", type=Path, help="the embedded Postgres's folder (as `numerator up`)"
        )
        action.add_argument("--ephemeral", action="store_true", help="a throwaway database")
    sam.set_defaults(run=later("numerator.samlocal:run_sam_local"))


def add_counters(commands: Any) -> Any:
    counters = commands.add_parser("counters", help="create, read and list counters")
    actions = counters.add_subparsers(title="actions", metavar="ACTION")
    create = actions.add_parser("create", help="create a counter")
    create.add_argument("name", help="the counter's name")
    create.add_argument("--start", type=int, help="the first value (default 1)")
    create.add_argument("--template", help="e.g. 'INV-{yyyy}-{value:06d}' (default '{value}')")
    create.add_argument(
        "--reset",
        choices=["never", "yearly", "monthly", "daily"],
        help="start again at --start each period (default never)",
    )
    create.add_argument("--timezone", help="IANA name, e.g. Europe/Berlin (default UTC)")
    create.add_argument(
        "--retention-days",
        type=int,
        help="keep the audit trail of a period this long after it ends (default: "
        "AUDIT_RETENTION_S)",
    )
    create.add_argument(
        "--confirm",
        action="store_const",
        const="required",  # ConfirmMode.REQUIRED: the parser imports no model, to start fast
        help="each value must be confirmed (numerator confirm) within CONFIRM_TTL_S, else it "
        "is voided, not-confirmed",
    )
    talking(create)
    create.set_defaults(run=later("numerator.console:run_create"))
    get = actions.add_parser("get", help="show a counter and its last value")
    get.add_argument("name", help="the counter's name")
    talking(get)
    get.set_defaults(run=later("numerator.console:run_get"))
    listing = actions.add_parser("list", help="list counters")
    listing.add_argument(
        "--limit", type=int, default=100, help="counters per page (%(default)s, at most 1000)"
    )
    listing.add_argument("--after", help="start after this name (the 'more' hint of a page)")
    talking(listing)
    listing.set_defaults(run=later("numerator.console:run_list"))
    add_rewinds(actions)
    return actions


def add_rewinds(actions: Any) -> None:
    rewinds = actions.add_parser(
        "rewinds",
        help="the counters refused because Postgres forgot values already handed out",
        description="List the counters (and periods) a batcher found below values it had handed "
        "out, as after a failover to a standby that lacked the primary's last commits: they are "
        "refused until mended. Reads Postgres (--database-url or DATABASE_URL).",
    )
    database(rewinds)
    rewinds.add_argument("--json", action="store_true", help="print JSON")
    rewinds.set_defaults(run=later("numerator.rewinds:run_rewinds"))
    mend = actions.add_parser(
        "mend",
        help="raise a rewound counter past the values handed out, so that it is served again",
        description="Raise the counter's last value to the highest value its rewind says was "
        "handed out (or to --past, when higher), and forget the rewind: the batchers serve it "
        "again from the next value. Writes Postgres (--database-url or DATABASE_URL).",
    )
    mend.add_argument("name", nargs="?", help="the counter's name")
    mend.add_argument("--all", action="store_true", help="every rewound counter (no NAME)")
    mend.add_argument("--period", help=f"{PERIOD_HELP}; default: every rewound period")
    mend.add_argument(
        "--past",
        type=int,
        metavar="VALUE",
        help="raise it to at least VALUE: a value clients may hold that no batcher saw (from "
        "the reply table, your own records, or `numerator audit verify --heads`)",
    )
    database(mend)
    mend.add_argument("--json", action="store_true", help="print JSON")
    mend.set_defaults(run=later("numerator.rewinds:run_mend"))


def add_next(commands: Any) -> None:
    nxt = commands.add_parser("next", help="take the next value(s) of a counter")
    nxt.add_argument("name", help="the counter's name")
    nxt.add_argument(
        "--count", type=int, default=1, help="take this many consecutive values (%(default)s)"
    )
    nxt.add_argument(
        "--idempotency-key",
        help="a retry with the same key gets the same values (default: one made per call, "
        "sent again by the CLI's own retries)",
    )
    talking(nxt)
    nxt.set_defaults(run=later("numerator.console:run_next"))


def add_keys(commands: Any) -> None:
    parser = commands.add_parser("keys", help="create, list and revoke API keys")
    actions = parser.add_subparsers(title="actions", metavar="ACTION")
    create = actions.add_parser("create", help="create a key and print its secret, once")
    create.add_argument("name", help="the API key's name")
    create.add_argument("--scope", action="append", required=True, help=SCOPES_HELP)
    listing = actions.add_parser("list", help="list keys (never their secrets)")
    revoke = actions.add_parser("revoke", help="revoke the key of this name")
    revoke.add_argument("name", help="the API key's name")
    for action, name in ((create, "create"), (listing, "list"), (revoke, "revoke")):
        talking(action)
        action.add_argument(
            "--database-url",
            help="work on this Postgres directly instead of over the API (the first key)",
        )
        action.set_defaults(run=later("numerator.keys:run"), action=name)


def add_ledger(commands: Any, counters: Any) -> None:
    void = commands.add_parser("void", help="take values out of use, for a reason (idempotent)")
    void.add_argument("name", help="the counter's name")
    void.add_argument(
        "values",
        nargs="+",
        type=int,
        metavar="VALUE",
        help="values to void (numbers, not formatted)",
    )
    void.add_argument("--reason", required=True, help="why, for the audit trail")
    void.add_argument("--period", help=PERIOD_HELP)
    talking(void)
    void.set_defaults(run=later("numerator.ledger:run_void"))

    confirm = commands.add_parser(
        "confirm", help="confirm values were used (a counter created with --confirm)"
    )
    confirm.add_argument("name", help="the counter's name")
    confirm.add_argument(
        "values", nargs="+", type=int, metavar="VALUE", help="values to confirm (the plain number)"
    )
    confirm.add_argument("--period", help=PERIOD_HELP)
    talking(confirm)
    confirm.set_defaults(run=later("numerator.ledger:run_confirm"))

    report = counters.add_parser("report", help="the completeness report of a period")
    report.add_argument("name", help="the counter's name")
    report.add_argument("--period", help=PERIOD_HELP)
    talking(report)
    report.add_argument("--csv", action="store_true", help="the issued range, voids and gaps")
    report.set_defaults(run=later("numerator.ledger:run_report"))

    audit = commands.add_parser("audit", help="verify and export the audit trail")
    actions = audit.add_subparsers(title="actions", metavar="ACTION")
    verify = actions.add_parser(
        "verify", help="check the hash chains and the tables beside them; exit 1 if broken"
    )
    verify.add_argument("name", nargs="?", help="only the chains holding this counter's rows")
    verify.add_argument(
        "--heads",
        type=Path,
        help="heads kept earlier (`audit heads --json`, or an anchor sink's records): prove "
        "the chains still hold every one of them and only extend them, and that each chain "
        "starts where the newest anchored prune left it",
    )
    talking(verify)
    verify.set_defaults(run=later("numerator.ledger:run_verify"))
    heads = actions.add_parser("heads", help="each hash chain's head: keep it outside Postgres")
    talking(heads)
    heads.set_defaults(run=later("numerator.ledger:run_heads"))
    export = actions.add_parser("export", help="what an auditor keeps of a period")
    export.add_argument("name", help="the counter's name")
    export.add_argument("--period", help=PERIOD_HELP)
    export.add_argument("--csv", action="store_true", help="CSV instead of JSON")
    export.add_argument("--out", type=Path, help="write it here instead of to stdout")
    talking(export)
    export.set_defaults(run=later("numerator.ledger:run_export"))


def serving(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (%(default)s; another needs an API key or an authorizer)",
    )
    parser.add_argument("--port", type=int, default=8080, help="the port (%(default)s)")
    parser.add_argument("--workers", type=int, default=1, help="HTTP worker processes")
    tiers = "2: one batcher process for every worker (default); 1: each batches on its own"
    parser.add_argument("--tiers", type=int, choices=[1, 2], help=f"with --workers N: {tiers}")
    database(parser)
    parser.add_argument(
        "--wait-for-db",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait at start for Postgres to take connections (default 10)",
    )


def database(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", help="the Postgres (default: $DATABASE_URL)")


def talking(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help=f"the service (default: $NUMERATOR_URL or {DEFAULT_URL})")
    parser.add_argument(
        "--key",
        help="the API key to send (default: $NUMERATOR_KEY; none: loopback, before any key)",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON the service sent")


def number(text: str) -> float:
    """A number for --rps and the like; the plan says what is wrong with its value."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def add_plan(commands: Any) -> None:
    plan = commands.add_parser(
        "plan",
        help="what a rate needs and costs on AWS: shards, batchers, edge, calls, limits",
        description="Size and price a deployment for a rate, for each edge, from the bench's "
        "measurements (numerator/plan/measured.json) and a dated prices file. "
        "`numerator plan --rps 10000`.",
    )
    plan.add_argument("--rps", type=number, help="the mean rate, requests a second")
    plan.add_argument(
        "--edge",
        choices=["lambda", "server", "atomic", "both"],
        default="both",
        help="the Lambda edge (API Gateway), the server edge (Fargate behind an ALB), the atomic "
        "counter a serverless user would write instead (not numerator: DynamoDB UpdateItem ADD), "
        "or both edges with the atomic counter beside (default)",
    )
    plan.add_argument("--counters", type=int, default=10, help="counters in use (default 10)")
    plan.add_argument(
        "--hot-share",
        type=number,
        help="the share of requests on the busiest counter, above 0 to 1 (default 0.5; 1 with "
        "one counter)",
    )
    plan.add_argument("--count", type=int, default=1, help="values per request (default 1)")
    plan.add_argument(
        "--peak-to-mean",
        type=number,
        default=2.0,
        help="the peak rate over the mean: capacity is sized for the peak (default 2)",
    )
    plan.add_argument("--region", default="us-east-1", help="AWS region of the prices")
    plan.add_argument(
        "--prices", type=Path, help="a prices file of the same shape as the one shipped"
    )
    plan.add_argument("--json", action="store_true", help="the plan as JSON")
    add_plan_measures(plan)
    add_plan_bill(plan)
    plan.set_defaults(run=later("numerator.plan.render:run_plan"))


def add_plan_bill(plan: Any) -> None:
    """`numerator plan`'s options of the bill's lines past the service's own: logs, the load
    balancer's connections."""
    plan.add_argument(
        "--measure-logs",
        action="store_true",
        help="measure again only the bytes each edge logs a request (its real handler on moto; "
        "about a minute), kept in measured.json",
    )
    plan.add_argument(
        "--new-connections",
        type=number,
        help="new client connections a second at the server edge's load balancer, which bills "
        "them (default: the rate over 100, clients keeping a connection for 100 requests)",
    )


def add_plan_measures(plan: Any) -> None:
    """`numerator plan`'s options of what is measured again, and of the Lambdas."""
    plan.add_argument(
        "--measure",
        action="store_true",
        help="measure again what the plan reads: the bench on moto at two or three rates per "
        "edge, the Lambda edge's five times each, each run warm first (about ten minutes), "
        "written to numerator/plan/measured.json; with --edge, that edge only, the others' runs "
        "kept",
    )
    plan.add_argument(
        "--measure-cpu",
        action="store_true",
        help="measure again only a Lambda's CPU a warm invocation (the edge's and the atomic "
        "counter's, one simulated container each, five probes; about two minutes), kept in "
        "measured.json",
    )
    plan.add_argument(
        "--memory",
        type=int,
        default=512,
        help="a Lambda's memory in MB (template.yaml's EdgeMemory, default 512): its share of a "
        "vCPU, so how long its CPU takes, and its price a second",
    )
    plan.add_argument(
        "--url",
        action="store_true",
        help="the Lambdas reached by their function URL (template.yaml's FunctionUrl=true), not "
        "API Gateway: no API Gateway line and no throttle of its own",
    )
