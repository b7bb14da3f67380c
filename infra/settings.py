"""Settings, read once from the environment into a frozen object and validated eagerly."""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TypeVar
from urllib.parse import quote

from infra.errors import SettingsError

T = TypeVar("T", int, float)
MODES = ("embedded", "aws")
POLICIES = ("fixed", "auto")
AUTHS = ("keys", "none")
MAX_HEADER_BUFFER = 65_536  # the HTTP server refuses headers beyond this itself (a bare 431)
LOOPBACK_ONLY = "loopback only"  # AUTHORIZER: nothing in front but a loopback listener
RESOURCE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")  # Kinesis stream and DynamoDB table names


@dataclass(frozen=True, slots=True)
class Settings:
    """Every knob, with its environment variable (the field name in upper case)."""

    database_url: str = ""  # DATABASE_URL: a postgresql:// URL, or an RDS secret's JSON
    # DATABASE_SECRET_ARN: a Secrets Manager secret holding either, read on first use (Lambda)
    database_secret_arn: str = ""
    back_frame_ms: float = (
        10.0  # BACK_FRAME_MS: how long the batcher collects before one transaction
    )
    frame_max_records: int = 10_000  # FRAME_MAX_RECORDS: a frame closes early at this size
    frame_policy: str = "auto"  # FRAME_POLICY: auto (group commit) or fixed (BACK_FRAME_MS)
    frame_min_ms: float = 0.5  # FRAME_MIN_MS: auto: least gap after a commit before the next
    max_frames_per_s: float = 0.0  # MAX_FRAMES_PER_S: cap on transactions per shard (0: none)
    reply_timeout_s: float = 5.0  # REPLY_TIMEOUT_S: how long a request waits for its reply (504)
    idempotency_retention_s: float = 86_400.0  # IDEMPOTENCY_RETENTION_S: how long a key is kept
    audit_retention_s: float = (
        86_400.0  # AUDIT_RETENTION_S: how long allocations and dead letters are kept
    )
    # CONFIRM_TTL_S: a value of a counter that needs confirmation, not confirmed this long
    # after it was handed out, is voided (not-confirmed)
    confirm_ttl_s: float = 3600.0
    stream_capacity: int = 50_000  # STREAM_CAPACITY: records waiting beyond this get 503
    max_body_bytes: int = 16_384  # MAX_BODY_BYTES: larger request bodies get 413
    retry_after_s: int = 1  # RETRY_AFTER_S: the Retry-After of a 503
    pool_max: int = 4  # POOL_MAX: Postgres connections per process
    lease_ttl_s: float = 30.0  # LEASE_TTL_S: a silent batcher's shards are taken over after this
    mode: str = "embedded"  # MODE: embedded (in-process stream) or aws (Kinesis and DynamoDB)
    workers: int = 1  # WORKERS: HTTP worker processes (set by --workers)
    stream_name: str = "numerator"  # STREAM_NAME: the Kinesis stream (aws mode)
    reply_table: str = "numerator-replies"  # REPLY_TABLE: the DynamoDB reply table (aws mode)
    shards: int = 1  # SHARDS: shards of the stream `numerator aws init` creates
    partition_spread: int = 1  # PARTITION_SPREAD: shards one counter's records spread over
    front_frame_ms: float = 20.0  # FRONT_FRAME_MS: aws server edge gathers /next this long; 0: off
    front_frame_policy: str = "fixed"  # FRONT_FRAME_POLICY: fixed (FRONT_FRAME_MS) or auto
    read_interval_ms: float = 200.0  # READ_INTERVAL_MS: least time between reads of a shard
    reply_ttl_s: int = 3600  # REPLY_TTL_S: a reply item's time to live in the reply table
    aws_threads: int = 16  # AWS_THREADS: threads (and connections) for boto3 calls per process
    # LAMBDA_CONTAINERS: concurrent invocations of `--edge lambda`. Each container polls the
    # reply table on its own, as in Lambda; locally that table is moto's or LocalStack's, and
    # 32 pollers saturated moto (~100 calls/s) so that 300 requests took 21 s against 11 s with 8.
    lambda_containers: int = 8
    emf_interval_s: float = 0.0  # EMF_INTERVAL_S: the batcher's CloudWatch EMF lines (0: none)
    auth: str = "keys"  # AUTH: keys (Bearer API keys) or none (loopback only, or an AUTHORIZER)
    authorizer: str = ""  # AUTHORIZER: what checks callers in front of the edge (AUTH=none)
    keys_refresh_s: float = 2.0  # KEYS_REFRESH_S: how old the edge's copy of the keys may get
    idempotency_keys_per_s: float = 2000.0  # IDEMPOTENCY_KEYS_PER_S: per client, per edge process
    max_header_bytes: int = 8192  # MAX_HEADER_BYTES: larger request headers get 431
    header_timeout_s: float = 10.0  # HEADER_TIMEOUT_S: a connection must send its headers by then
    body_timeout_s: float = 10.0  # BODY_TIMEOUT_S: a request body must arrive by then (408)
    max_connections: int = 10_000  # MAX_CONNECTIONS: open connections per HTTP worker

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for field in fields(cls):
            variable = field.name.upper()
            raw = env.get(variable)
            if raw is None or raw == "":
                continue
            if field.name == "database_url":
                values[field.name] = database_url_of(raw)
            elif field.type == "str":
                values[field.name] = raw
            elif field.type == "int":
                values[field.name] = _number(variable, raw, int)
            else:
                values[field.name] = _number(variable, raw, float)
        settings = cls(**values)  # type: ignore[arg-type]
        settings.check()
        return settings

    def check(self) -> None:
        positive: list[tuple[str, float]] = [
            ("BACK_FRAME_MS", self.back_frame_ms),
            ("FRAME_MAX_RECORDS", self.frame_max_records),
            ("REPLY_TIMEOUT_S", self.reply_timeout_s),
            ("IDEMPOTENCY_RETENTION_S", self.idempotency_retention_s),
            ("AUDIT_RETENTION_S", self.audit_retention_s),
            ("CONFIRM_TTL_S", self.confirm_ttl_s),
            ("STREAM_CAPACITY", self.stream_capacity),
            ("MAX_BODY_BYTES", self.max_body_bytes),
            ("RETRY_AFTER_S", self.retry_after_s),
            ("POOL_MAX", self.pool_max),
            ("LEASE_TTL_S", self.lease_ttl_s),
            ("WORKERS", self.workers),
            ("SHARDS", self.shards),
            ("PARTITION_SPREAD", self.partition_spread),
            ("READ_INTERVAL_MS", self.read_interval_ms),
            ("REPLY_TTL_S", self.reply_ttl_s),
            ("AWS_THREADS", self.aws_threads),
            ("LAMBDA_CONTAINERS", self.lambda_containers),
            ("KEYS_REFRESH_S", self.keys_refresh_s),
            ("IDEMPOTENCY_KEYS_PER_S", self.idempotency_keys_per_s),
            ("MAX_HEADER_BYTES", self.max_header_bytes),
            ("HEADER_TIMEOUT_S", self.header_timeout_s),
            ("BODY_TIMEOUT_S", self.body_timeout_s),
            ("MAX_CONNECTIONS", self.max_connections),
        ]
        for variable, value in positive:
            if value <= 0:
                raise SettingsError(variable, f"must be greater than 0, not {value}")
        if self.back_frame_ms > 10_000:
            raise SettingsError("BACK_FRAME_MS", "must be at most 10000 (10 s)")
        for variable, policy in (
            ("FRAME_POLICY", self.frame_policy),
            ("FRONT_FRAME_POLICY", self.front_frame_policy),
        ):
            if policy not in POLICIES:
                raise SettingsError(
                    variable, f"must be one of {', '.join(POLICIES)}, not {policy!r}"
                )
        if self.front_frame_ms > 10_000:
            raise SettingsError("FRONT_FRAME_MS", "must be at most 10000 (10 s)")
        for variable, value in (
            ("FRONT_FRAME_MS", self.front_frame_ms),
            ("EMF_INTERVAL_S", self.emf_interval_s),
            ("FRAME_MIN_MS", self.frame_min_ms),
            ("MAX_FRAMES_PER_S", self.max_frames_per_s),
        ):
            if value < 0:
                raise SettingsError(variable, f"must be 0 or more, not {value}")
        if self.auth not in AUTHS:
            raise SettingsError("AUTH", f"must be one of {', '.join(AUTHS)}, not {self.auth!r}")
        if self.keys_refresh_s > 5:
            raise SettingsError(
                "KEYS_REFRESH_S", "must be at most 5: a revoked key stops within it"
            )
        if self.max_header_bytes > MAX_HEADER_BUFFER:
            raise SettingsError("MAX_HEADER_BYTES", f"must be at most {MAX_HEADER_BUFFER}")
        if self.mode not in MODES:
            raise SettingsError("MODE", f"must be one of {', '.join(MODES)}, not {self.mode!r}")
        for variable, name in (
            ("STREAM_NAME", self.stream_name),
            ("REPLY_TABLE", self.reply_table),
        ):
            if not RESOURCE.fullmatch(name):
                raise SettingsError(variable, "must be 1-128 letters, digits, '_', '-' or '.'")
        if self.database_url and not self.database_url.startswith(("postgres://", "postgresql://")):
            raise SettingsError("DATABASE_URL", "must start with postgresql://")

    def open_to(self, host: str | None) -> str | None:
        """Why these settings must not serve on `host` (None: the Lambda handler, where API
        Gateway is the listener), or None. AUTH=none checks nobody: only loopback clients can
        reach it, or an authorizer the settings name stands in front."""
        if self.auth == "keys" or self.authorizer:
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
        return self.auth == "none" and (
            not self.authorizer or self.authorizer.startswith(LOOPBACK_ONLY)
        )

    def to_env(self) -> dict[str, str]:
        """The environment that reproduces these settings in a worker process."""
        return {f.name.upper(): str(getattr(self, f.name)) for f in fields(self)}


@functools.lru_cache(maxsize=4096)  # per request before the first key: ip_address was 3 % of /next
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


def _number(variable: str, raw: str, kind: Callable[[str], T]) -> T:
    try:
        return kind(raw)
    except ValueError:
        name = "an integer" if kind is int else "a number"
        raise SettingsError(variable, f"must be {name}, not {raw!r}") from None
