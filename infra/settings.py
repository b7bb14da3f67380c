"""Settings, read once from the environment into a frozen object and validated eagerly."""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import json
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, get_type_hints
from urllib.parse import quote, urlsplit, urlunsplit

from infra.errors import SettingsError

MAX_HEADER_BUFFER = 65_536  # the HTTP server refuses headers beyond this itself (a bare 431)
LOOPBACK_ONLY = "loopback only"  # AUTHORIZER: nothing in front but a loopback listener
RESOURCE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")  # Kinesis stream and DynamoDB table names
MIN_PUSH_KEY = 32  # characters of a push key: 32 random alphanumerics hold some 190 bits


class Mode(StrEnum):
    """Which stream and reply table the service runs on."""

    EMBEDDED = "embedded"
    """An in-process stream and replies; the batcher runs inside each HTTP worker."""
    AWS = "aws"
    """Kinesis and DynamoDB; `numerator batcher` runs apart."""


class Policy(StrEnum):
    """When a frame closes (the batcher's back frames; the server edge's front frames)."""

    FIXED = "fixed"
    """The seed's: a fixed time after its oldest record was put."""
    AUTO = "auto"
    """Group commit: as soon as the previous frame's transaction (or put) is done and
    FRAME_MIN_MS has passed since, so one commit of wait at low load and frames that grow by
    themselves at high load; the frame's time setting is the longest a record waits."""


class FrontPolicy(StrEnum):
    """When the server edge's front frame closes (FRONT_FRAME_POLICY)."""

    FIXED = "fixed"
    """FRONT_FRAME_MS after its first request: about 50 puts a second at load, where the
    batchers read each shard five times a second."""
    AUTO = "auto"
    """As the batcher's auto frames: once the previous put has returned and FRAME_MIN_MS has
    passed, FRONT_FRAME_MS being the longest wait."""
    BEATS = "beats"
    """At the last moment its put returns before a batcher's next read, and at most one frame a
    FRONT_FRAME_MS: a put a read, where a record put sooner waited for the same read. On shared
    beats (the server edge's default) the next beat of READ_INTERVAL_MS, and one more put for
    the requests that came just after the beat's frame closed (a second chance at that beat);
    on phased beats the next read of any shard, and the frame goes to that shard. The default."""


class ReplyItems(StrEnum):
    """How a long-running edge on the AWS path has its replies kept in the reply table."""

    FRAME = "frame"
    """An item per edge per frame, read with one Query of the edge's partition
    (infra/adapters/dynamodb.py): a fraction of the reply table's cost (docs/performance.md,
    "Replies a frame at a time"). The default."""
    RECORD = "record"
    """An item per record, read by key: as the Lambda edge always does."""


class ReadBeats(StrEnum):
    """When a batcher reads each shard (infra/adapters/beats.py)."""

    SHARED = "shared"
    """Every shard on the same beats, the multiples of READ_INTERVAL_MS: a batcher's frames
    commit together and publish their replies together (batcher/gather.py): fewer reply items
    and transactions, and a request waits half the interval for its read whatever the shards."""
    PHASED = "phased"
    """Each shard on beats of its own phase, spread over the interval, and a record without an
    Idempotency-Key (the Lambda edge's; a server edge's front frame) put on the shard read next
    after its put returns: it waits a fraction of the interval for its read, not half of it.
    The default, for both edges: on one shard it is shared beats, on more it wins (on moto, four
    shards: the server edge's p50 0.4 times shared beats', docs/performance.md)."""


class Pooler(StrEnum):
    """What stands between numerator and Postgres (docs/deploy.md, "Behind a pooler")."""

    NONE = "none"
    """Nothing, or a pooler in session mode: a connection is one server session."""
    TRANSACTION = "transaction"
    """PgBouncer in transaction pooling mode, or RDS Proxy: each transaction may run on another
    server session, so numerator keeps no state in a session (no startup options, no prepared
    statements, its limits set in each transaction, key changes polled instead of LISTEN)."""


class Auth(StrEnum):
    """Who checks callers."""

    KEYS = "keys"
    """The edge: Bearer API keys with scopes."""
    NONE = "none"
    """Nobody at the edge: loopback only, or an AUTHORIZER in front."""


class Group:
    """A part of the settings, read by one kind of component. Each field's environment variable
    is its name in upper case; `check` refuses values that cannot work, naming the variable."""

    __slots__ = ()
    POSITIVE: ClassVar[tuple[str, ...]] = ()  # fields that must be greater than 0
    NOT_NEGATIVE: ClassVar[tuple[str, ...]] = ()  # fields that may be 0 (off) but not less
    AT_MOST: ClassVar[dict[str, tuple[float, str]]] = {}  # field: (its largest value, why)

    def check(self) -> None:
        for name in self.POSITIVE:
            if (value := getattr(self, name)) <= 0:
                raise SettingsError(name.upper(), f"must be greater than 0, not {value}")
        for name in self.NOT_NEGATIVE:
            if (value := getattr(self, name)) < 0:
                raise SettingsError(name.upper(), f"must be 0 or more, not {value}")
        for name, (most, why) in self.AT_MOST.items():
            if getattr(self, name) > most:
                raise SettingsError(name.upper(), f"must be at most {most:g}{why}")


@dataclass(frozen=True, slots=True)
class DatabaseSettings(Group):
    """Postgres: read by the store (every process that allocates or reads counters)."""

    database_url: str = ""  # DATABASE_URL: a postgresql:// URL, or an RDS secret's JSON
    # DATABASE_SECRET_ARN: a Secrets Manager secret holding either, read on first use (Lambda)
    database_secret_arn: str = ""
    pool_max: int = 4  # POOL_MAX: Postgres connections per process
    # DATABASE_POOLER: none, or transaction (PgBouncer in transaction mode, RDS Proxy)
    database_pooler: Pooler = Pooler.NONE
    # DATABASE_HOST: the host to reach Postgres at instead of the one DATABASE_URL or the secret
    # names (an RDS Proxy's endpoint, where the secret names the instance)
    database_host: str = ""

    def __post_init__(self) -> None:
        if self.database_host and self.database_url:
            object.__setattr__(
                self, "database_url", with_host(self.database_url, self.database_host)
            )

    POSITIVE = ("pool_max",)

    def check(self) -> None:
        Group.check(self)
        if self.database_url and not self.database_url.startswith(("postgres://", "postgresql://")):
            raise SettingsError("DATABASE_URL", "must start with postgresql://")

    @property
    def pooled(self) -> bool:
        """Whether a transaction pooler stands in front: no state may be kept in a session."""
        return self.database_pooler is Pooler.TRANSACTION


@dataclass(frozen=True, slots=True)
class FrameSettings(Group):
    """The batcher: its frames, its leases on shards, its metrics lines."""

    back_frame_ms: float = 10.0  # BACK_FRAME_MS: how long the batcher collects at most
    frame_max_records: int = 10_000  # FRAME_MAX_RECORDS: a frame closes early at this size
    frame_policy: Policy = Policy.AUTO  # FRAME_POLICY: auto (group commit) or fixed
    frame_min_ms: float = 0.5  # FRAME_MIN_MS: auto: least gap after a commit before the next
    max_frames_per_s: float = 0.0  # MAX_FRAMES_PER_S: cap on transactions per shard (0: none)
    lease_ttl_s: float = 30.0  # LEASE_TTL_S: a silent batcher's shards are taken over after this
    emf_interval_s: float = 0.0  # EMF_INTERVAL_S: batcher and AWS server edge EMF lines (0: none)

    POSITIVE = ("back_frame_ms", "frame_max_records", "lease_ttl_s")
    NOT_NEGATIVE = ("frame_min_ms", "max_frames_per_s", "emf_interval_s")
    AT_MOST = {"back_frame_ms": (10_000, " (10 s)")}


@dataclass(frozen=True, slots=True)
class RetentionSettings(Group):
    """How long what the ledger and retries rely on is kept: read by the batcher (which writes
    and prunes it) and the reply adapters."""

    idempotency_retention_s: float = 86_400.0  # IDEMPOTENCY_RETENTION_S: how long a key is kept
    # AUDIT_RETENTION_S: how long allocations and dead letters are kept
    audit_retention_s: float = 86_400.0
    # CONFIRM_TTL_S: a value of a counter that needs confirmation, not confirmed this long
    # after it was handed out, is voided (not-confirmed)
    confirm_ttl_s: float = 3600.0
    reply_ttl_s: int = 3600  # REPLY_TTL_S: a reply item's time to live in the reply table
    # ANCHOR_TO: where batchers keep the audit chains' heads outside Postgres, append-only: a
    # file of JSON lines, or s3://bucket/prefix (a bucket with Object Lock); '' keeps none
    anchor_to: str = ""
    anchor_every_s: float = 60.0  # ANCHOR_EVERY_S: how often the heads are kept there

    POSITIVE = (
        "idempotency_retention_s",
        "audit_retention_s",
        "confirm_ttl_s",
        "reply_ttl_s",
        "anchor_every_s",
    )


@dataclass(frozen=True, slots=True)
class EdgeSettings(Group):
    """The HTTP edge: what a request may be, how long it waits, who may call."""

    reply_timeout_s: float = 5.0  # REPLY_TIMEOUT_S: how long a request waits for its reply (504)
    stream_capacity: int = 50_000  # STREAM_CAPACITY: records waiting beyond this get 503
    max_body_bytes: int = 16_384  # MAX_BODY_BYTES: larger request bodies get 413
    retry_after_s: int = 1  # RETRY_AFTER_S: the Retry-After of a 503
    front_frame_ms: float = 20.0  # FRONT_FRAME_MS: aws server edge gathers /next this long; 0: off
    front_frame_policy: FrontPolicy = FrontPolicy.BEATS  # FRONT_FRAME_POLICY: fixed, auto, beats
    reply_items: ReplyItems = ReplyItems.FRAME  # REPLY_ITEMS: frame or record (server edge)
    # REPLY_PUSH: where a server edge takes its replies pushed by the batchers, before their
    # table write (infra/adapters/push.py): auto (this host's outward IPv4 address), an IPv4
    # address of this host, or off (the reply table alone)
    reply_push: str = "auto"
    auth: Auth = Auth.KEYS  # AUTH: keys (Bearer API keys) or none (loopback only, or AUTHORIZER)
    authorizer: str = ""  # AUTHORIZER: what checks callers in front of the edge (AUTH=none)
    keys_refresh_s: float = 2.0  # KEYS_REFRESH_S: how old the edge's copy of the keys may get
    idempotency_keys_per_s: float = 2000.0  # IDEMPOTENCY_KEYS_PER_S: per client, per process
    max_header_bytes: int = 8192  # MAX_HEADER_BYTES: larger request headers get 431
    header_timeout_s: float = 10.0  # HEADER_TIMEOUT_S: a connection must send its headers by then
    body_timeout_s: float = 10.0  # BODY_TIMEOUT_S: a request body must arrive by then (408)
    max_connections: int = 10_000  # MAX_CONNECTIONS: open connections per HTTP worker

    POSITIVE = (
        "reply_timeout_s",
        "stream_capacity",
        "max_body_bytes",
        "retry_after_s",
        "keys_refresh_s",
        "idempotency_keys_per_s",
        "max_header_bytes",
        "header_timeout_s",
        "body_timeout_s",
        "max_connections",
    )
    NOT_NEGATIVE = ("front_frame_ms",)
    AT_MOST = {
        "front_frame_ms": (10_000, " (10 s)"),
        "keys_refresh_s": (5, ": a revoked key stops within it"),
        "max_header_bytes": (MAX_HEADER_BUFFER, ""),
    }

    def check(self) -> None:
        Group.check(self)
        if self.reply_push not in ("auto", "off"):
            problem = not_ours(self.reply_push)
            if problem:
                raise SettingsError("REPLY_PUSH", problem)


def not_ours(address: str) -> str:
    """Why `address` cannot be where this host takes pushed replies ('' if it can): it must be
    one IPv4 address of this host that others can send to (records name it as it is)."""
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        return f"must be auto, off or an IPv4 address, not {address!r}"
    if ip.is_unspecified or ip.is_multicast or ip == ipaddress.IPv4Address("255.255.255.255"):
        return f"must name one address of this host that batchers can send to, not {address}"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError as exc:
            return f"{address} is not an address of this host ({exc.strerror or exc})"
    return ""


@dataclass(frozen=True, slots=True)
class AwsSettings(Group):
    """The AWS path: the stream and reply table, and how they are read (MODE=aws)."""

    stream_name: str = "numerator"  # STREAM_NAME: the Kinesis stream
    reply_table: str = "numerator-replies"  # REPLY_TABLE: the DynamoDB reply table
    # SHARDS: shards of the stream `numerator aws init` creates: four, as an on-demand stream
    # starts (template.yaml's default), read on phased beats a request waits 50 ms, not 200
    shards: int = 4
    partition_spread: int = 1  # PARTITION_SPREAD: shards one counter's records spread over
    # READ_INTERVAL_MS: a shard is read on its beats (the Unix times that are multiples of it),
    # at least this far apart; edges read their replies on the same beats: set it alike for both
    read_interval_ms: float = 200.0
    # REPLY_LAG_MS: from a beat to when the replies of the records read on it are written,
    # besides BACK_FRAME_MS: an edge first reads a reply that long after its record's beat at
    # first, then when it has seen most of them written (DynamoReplies.lag)
    reply_lag_ms: float = 40.0
    # REPLY_GATHER_MS: the longest a batcher's frame waits to publish its replies with those of
    # the frames its other shards are applying (one item per edge for all): batcher/gather.py
    reply_gather_ms: float = 20.0
    # READ_BEATS: shared (every shard on the same beats) or phased (each on its own, and a lone
    # record put on the shard read next): set it alike for edges and batchers
    read_beats: ReadBeats = ReadBeats.PHASED
    aws_threads: int = 16  # AWS_THREADS: threads (and connections) for boto3 calls per process
    # PUSH_KEYS: the keys that sign the replies batchers push to server edges, shared out of
    # band (never in a record): the signing one first, then any only accepted, comma-separated
    push_keys: str = field(default="", repr=False)
    # PUSH_KEY_SECRET_ARN: a Secrets Manager secret holding the push key instead (AWSCURRENT
    # signs; AWSPENDING and AWSPREVIOUS are accepted), read at start and every
    # PUSH_KEY_REFRESH_S
    push_key_secret_arn: str = ""
    push_key_refresh_s: float = 60.0  # PUSH_KEY_REFRESH_S: how often the secret is read again

    POSITIVE = ("shards", "partition_spread", "read_interval_ms", "aws_threads")
    NOT_NEGATIVE = ("reply_lag_ms", "reply_gather_ms")
    AT_MOST = {"reply_gather_ms": (1000, " (1 s): frames wait for it")}

    def check(self) -> None:
        Group.check(self)
        for name in ("stream_name", "reply_table"):
            if not RESOURCE.fullmatch(getattr(self, name)):
                raise SettingsError(name.upper(), "must be 1-128 letters, digits, '_', '-' or '.'")
        if any(len(key.strip()) < MIN_PUSH_KEY for key in self.push_keys.split(",") if key):
            raise SettingsError("PUSH_KEYS", f"each key must be at least {MIN_PUSH_KEY} characters")
        if self.push_keys and self.push_key_secret_arn:
            raise SettingsError("PUSH_KEYS", "set it or PUSH_KEY_SECRET_ARN, not both")
        if self.push_key_refresh_s < 1:
            raise SettingsError("PUSH_KEY_REFRESH_S", "must be at least 1")


@dataclass(frozen=True, slots=True)
class LocalSettings(Group):
    """Knobs of the local runners only (`numerator up`, the bench); a deployment leaves them."""

    workers: int = 1  # WORKERS: HTTP worker processes (set by --workers)
    # LAMBDA_CONTAINERS: concurrent invocations of `--edge lambda`. Each container polls the
    # reply table on its own, as in Lambda; locally that table is moto's or LocalStack's, which
    # many pollers saturate: requests then take longer (docs/performance.md).
    lambda_containers: int = 8
    # TIERS: with WORKERS of 2 or more on the embedded path, 2: the workers hand their front
    # frames to one batcher process (the machine's, over HUB); 1: each worker batches on its own
    tiers: int = 2
    # HUB: the unix socket of the machine's batcher, which `up --workers N` starts beside its
    # HTTP workers (two tiers on one machine, infra/adapters/hub.py); empty, each worker
    # batches on its own.
    hub: str = ""

    POSITIVE = ("workers", "lambda_containers")

    def check(self) -> None:
        Group.check(self)
        if self.tiers not in (1, 2):
            raise SettingsError("TIERS", "must be 1 or 2")


@dataclass(frozen=True, slots=True)
class TraceSettings(Group):
    """OpenTelemetry traces (infra/observe/traces.py): off unless one of these names where they
    go. Sampling, the service's name and the exporter's own knobs are the SDK's standard
    variables (OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME, ...), read by the SDK itself."""

    trace_file: str = ""  # TRACE_FILE: a file of JSON lines, a finished trace span a line
    otel_exporter_otlp_endpoint: str = ""  # OTEL_EXPORTER_OTLP_ENDPOINT: an OTLP/HTTP collector

    @property
    def on(self) -> bool:
        return bool(self.trace_file or self.otel_exporter_otlp_endpoint)


GROUPS: dict[str, type[Group]] = {
    "database": DatabaseSettings,
    "frames": FrameSettings,
    "retention": RetentionSettings,
    "edge": EdgeSettings,
    "aws": AwsSettings,
    "local": LocalSettings,
    "tracing": TraceSettings,
}


@dataclass(frozen=True, slots=True)
class Settings:
    """Every knob, grouped by who reads it; built once at the program's edge (`from_env`, or
    `of` with keyword arguments) and handed down, to children as `to_env()`."""

    mode: Mode = Mode.EMBEDDED  # MODE: embedded (in-process stream) or aws (Kinesis, DynamoDB)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    frames: FrameSettings = field(default_factory=FrameSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    edge: EdgeSettings = field(default_factory=EdgeSettings)
    aws: AwsSettings = field(default_factory=AwsSettings)
    local: LocalSettings = field(default_factory=LocalSettings)
    tracing: TraceSettings = field(default_factory=TraceSettings)

    @classmethod
    def of(cls, **values: object) -> Settings:
        """Settings from keyword arguments named as the fields (`back_frame_ms=5`), checked."""
        return cls().but(**values)

    def but(self, **values: object) -> Settings:
        """These settings with some fields changed (by field name, in any group), checked."""
        changes: dict[str, dict[str, object]] = {}
        top: dict[str, object] = {}
        for name, value in values.items():
            if name == "mode":
                top[name] = parse("MODE", str(value), Mode)
                continue
            group = OWNER.get(name)
            if group is None:
                raise TypeError(f"no setting named {name!r}")
            kind = VARIABLES[name.upper()][2]
            if issubclass(kind, StrEnum) and not isinstance(value, kind):
                value = parse(name.upper(), str(value), kind)
            changes.setdefault(group, {})[name] = value
        for group, fields_ in changes.items():
            top[group] = dataclasses.replace(getattr(self, group), **fields_)
        settings: Settings = dataclasses.replace(self, **top)  # type: ignore[arg-type]
        settings.check()
        return settings

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for variable, (_, name, kind) in VARIABLES.items():
            raw = env.get(variable)
            if raw is not None and raw != "":
                values[name] = parse(variable, raw, kind)
        return cls.of(**values)

    def check(self) -> None:
        for group in GROUPS:
            getattr(self, group).check()

    def to_env(self) -> dict[str, str]:
        """The environment that reproduces these settings in a child process."""
        out = {"MODE": str(self.mode)}
        for variable, (group, name, _) in VARIABLES.items():
            if group:
                out[variable] = str(getattr(getattr(self, group), name))
        return out

    def open_to(self, host: str | None) -> str | None:
        """Why these settings must not serve on `host` (None: the Lambda handler, where API
        Gateway is the listener), or None. AUTH=none checks nobody: only loopback clients can
        reach it, or an authorizer the settings name stands in front."""
        if self.edge.auth is Auth.KEYS or self.edge.authorizer:
            return None
        if host is not None and loopback(host):
            return None
        where = f"on {host}" if host is not None else "in Lambda"
        return (
            f"AUTH=none serves anyone who reaches it: {where} it needs AUTHORIZER (what checks "
            "callers in front, e.g. iam or jwt), or use AUTH=keys, or listen on loopback only"
        )

    @property
    def trusts_loopback(self) -> bool:
        """AUTH=none with nothing in front but the loopback listener (`numerator up` names it
        so for its simulated Lambda containers): every client on this machine is served, so
        the edge must tell a web page acting for the local user from the user (functions.auth)."""
        return self.edge.auth is Auth.NONE and (
            not self.edge.authorizer or self.edge.authorizer.startswith(LOOPBACK_ONLY)
        )


def _variables() -> dict[str, tuple[str, str, type]]:
    """Each environment variable: (its group, its field, its type)."""
    out: dict[str, tuple[str, str, type]] = {"MODE": ("", "mode", Mode)}
    for group, cls in GROUPS.items():
        hints = get_type_hints(cls)
        for item in dataclasses.fields(cls):  # type: ignore[arg-type]
            out[item.name.upper()] = (group, item.name, hints[item.name])
    return out


VARIABLES = _variables()
OWNER = {name: group for group, name, _ in VARIABLES.values() if group}


def parse(variable: str, raw: str, kind: type) -> object:
    """The value of an environment variable, as its field's type; a bad one names the variable."""
    if variable == "DATABASE_URL":
        return database_url_of(raw)
    if issubclass(kind, StrEnum):
        members = {str(member): member for member in kind}
        if raw not in members:
            choices = ", ".join(members)
            raise SettingsError(variable, f"must be one of {choices}, not {raw!r}")
        return members[raw]
    if kind is str:
        return raw
    number: Callable[[str], object] = int if kind is int else float
    try:
        return number(raw)
    except ValueError:
        name = "an integer" if kind is int else "a number"
        raise SettingsError(variable, f"must be {name}, not {raw!r}") from None


@functools.lru_cache(maxsize=4096)  # per request before the first key: ip_address showed on /next
def loopback(host: str) -> bool:
    """Whether `host` (an address or a name) is on this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def database_url_of(raw: str) -> str:
    """A Postgres URL from what DATABASE_URL (or the database secret) holds: a URL as it is, or
    the JSON of an RDS secret — {"username", "password", "host", "port", "dbname"} — as ECS and
    Secrets Manager hand it over."""
    text = raw.strip()
    if not text.startswith("{"):
        return text
    try:
        data = json.loads(text)
        user, password, host = data["username"], data["password"], data["host"]
    except (ValueError, KeyError, TypeError):
        raise SettingsError(
            "DATABASE_URL", "holds JSON that is not an RDS secret (username, password, host)"
        ) from None
    port, name = data.get("port", 5432), data.get("dbname") or "postgres"
    user, password, name = (quote(str(part), safe="") for part in (user, password, name))
    if str(host).startswith("/"):  # a Unix socket's folder
        return (
            f"postgresql://{user}:{password}@/{name}?host={quote(str(host), safe='')}&port={port}"
        )
    return f"postgresql://{user}:{password}@{host}:{port}/{name}"


def with_host(url: str, host: str) -> str:
    """`url` with its host (and nothing else) replaced by `host` (DATABASE_HOST); as it was
    without one. Its port stays: an RDS Proxy listens on the instance's."""
    if not host:
        return url
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    port = f":{parts.port}" if parts.port else ""
    netloc = (user + "@" if user else "") + host + port
    query = "&".join(q for q in parts.query.split("&") if q and not q.startswith("host="))
    return urlunsplit(parts._replace(netloc=netloc, query=query))
