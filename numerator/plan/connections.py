"""The Postgres connections a deployment holds, against its instance's `max_connections`, and
what to do when they do not fit: a larger instance class, or RDS Proxy in front, the cheaper.

Who holds what (docs/architecture.md, "Connections"): each server edge process its pool
(POOL_MAX) and one more that LISTENs for key changes; each batcher its pool; a Lambda container
none between invocations (functions/handler.py: a connection per counter route or key reload,
closed after), so the Lambda edge holds only the reloads under way.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from infra.settings import Settings
from numerator.plan.model import HEADROOM, EdgeKind, PlanError, Sizing

# RDS for PostgreSQL's default max_connections: LEAST({DBInstanceClassMemory/9531392}, 5000).
# DBInstanceClassMemory is the class's memory less what RDS keeps for its OS and processes,
# which AWS does not publish per class: the class's whole memory makes this an upper bound
# (a db.t4g.micro shows about 80, not 112), which HEADROOM covers. `SHOW max_connections`.
RDS_BYTES_PER_CONNECTION = 9_531_392
RDS_MOST_CONNECTIONS = 5_000
RESERVED = 3  # superuser_reserved_connections: not for numerator's role
INSTANCE_GIB = {"db.t4g.micro": 1, "db.t4g.small": 2, "db.m7g.large": 8}
INSTANCE_VCPUS = {"db.t4g.micro": 2, "db.t4g.small": 2, "db.m7g.large": 2}
PROXY_LEAST_VCPUS = 2  # RDS Proxy is billed per vCPU of the instance, two at least
OPERATORS = 2  # `numerator migrate`, `keys`, an operator's psql
DIRECT_CONNECTS_PER_S = 50
"""New connections a second a Postgres instance is asked to take straight, at most: each is a
backend started, TLS and a password check, a few ms of the instance's CPU (an assumption); past
it, RDS Proxy takes them and keeps its own few open."""
CONNECT_S = 0.05
"""How long a Lambda container holds a connection it opened for one key reload: a connect,
TLS and one query in the VPC (an assumption, not measured here)."""


def max_connections(instance: str) -> int:
    """The connections numerator may open on `instance` (RDS's default, less the reserved)."""
    memory = INSTANCE_GIB[instance] * 2**30
    return min(memory // RDS_BYTES_PER_CONNECTION, RDS_MOST_CONNECTIONS) - RESERVED


@dataclass(frozen=True)
class Budget:
    """A deployment's Postgres connections by holder, the instance they were counted against
    (a larger one than the commits needed when `larger` says why), and why RDS Proxy stands in
    front (`proxy`; empty: none)."""

    holders: dict[str, float]
    instance: str
    limit: int
    proxy: str = ""
    larger: str = ""
    connects_per_s: float = 0.0  # new connections a second (Lambda containers' key reloads)

    @property
    def total(self) -> float:
        return sum(self.holders.values())

    def lines(self) -> list[str]:
        out = [f"  {name}: {math.ceil(n):,}" for name, n in self.holders.items()]
        total = f"{math.ceil(self.total):,}"
        out.append(f"  in all: {total} of {self.instance}'s {self.limit:,} max_connections")
        if self.connects_per_s >= 1:
            out.append(f"  new connections a second: {self.connects_per_s:,.0f}")
        if self.larger:
            out.append(f"  so {self.instance}: {self.larger}, and it costs less than RDS Proxy")
        if self.proxy:
            out.append(
                f"  so RDS Proxy in front (RdsProxy=true, DATABASE_POOLER=transaction): "
                f"{self.proxy}; it shares {self.instance}'s connections among them"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "holders": {name: math.ceil(n) for name, n in self.holders.items()},
            "total": math.ceil(self.total),
            "instance": self.instance,
            "max_connections": self.limit,
            "rds_proxy": bool(self.proxy),
            "why": self.proxy or self.larger or None,
            "connects_per_s": round(self.connects_per_s, 1),
        }


def holders(sizing: Sizing, settings: Settings, keys: bool) -> tuple[dict[str, float], float]:
    """The connections each kind of process holds at most, and the new connections a second;
    `keys`: the Lambda containers check numerator's own API keys (Authorizer=NONE), each
    reloading them every KEYS_REFRESH_S while it serves."""
    pool = settings.database.pool_max
    out: dict[str, float] = {}
    connects = 0.0
    if sizing.edge is EdgeKind.SERVER:
        out[f"edge tasks ({sizing.edge_tasks} x (POOL_MAX {pool} + 1 listening))"] = (
            sizing.edge_tasks * (pool + 1)
        )
    elif sizing.edge is EdgeKind.LAMBDA:
        connects = sizing.concurrency / settings.edge.keys_refresh_s if keys else 0.0
        kept = f"{sizing.concurrency:,.0f}, none kept between invocations"
        why = "; key reloads under way, AUTH=keys" if keys else ""
        out[f"Lambda containers ({kept}{why})"] = connects * CONNECT_S
    out[f"batchers ({sizing.batchers} x POOL_MAX {pool})"] = sizing.batchers * pool
    out["operators (migrate, keys, psql)"] = OPERATORS
    return out, connects


def connection_budget(
    sizing: Sizing, instances: tuple[str, ...], usd: dict[str, float], keys: bool = True
) -> Budget:
    """The connections of `sizing` against its instance. When they pass HEADROOM of its
    max_connections, the cheaper of the smallest larger class that takes them and RDS Proxy in
    front of the instance it has (`usd`: the prices, an hour's); when Lambda containers would
    open more than DIRECT_CONNECTS_PER_S, RDS Proxy. `keys`: Lambda containers reload
    numerator's own API keys (Authorizer=NONE; the most a Lambda edge opens)."""
    counted, connects = holders(sizing, Settings.of(), keys)
    need, have = sum(counted.values()), sizing.instance_class
    made = functools.partial(Budget, counted, connects_per_s=connects)
    if connects > DIRECT_CONNECTS_PER_S:
        why = f"{connects:,.0f} new connections a second, over {DIRECT_CONNECTS_PER_S} straight"
        return made(have, max_connections(have), why)
    if fits(need, have):
        return made(have, max_connections(have))
    larger = [i for i in instances[instances.index(have) + 1 :] if fits(need, i)]
    why = f"{math.ceil(need):,} connections pass {HEADROOM:.0%} of {have}'s"
    if larger and 2 * (usd[f"rds_{larger[0]}_hour"] - usd[f"rds_{have}_hour"]) < proxy_hourly(
        have, usd
    ):  # Multi-AZ: two instances
        return made(larger[0], max_connections(larger[0]), "", why)
    return made(have, max_connections(have), why)


def fits(need: float, instance: str) -> bool:
    return need <= max_connections(instance) * HEADROOM


def proxy_hourly(instance: str, usd: dict[str, float]) -> float:
    """RDS Proxy's hour in front of `instance` (per vCPU of it, two at least)."""
    if "rds_proxy_vcpu_hour" not in usd:
        raise PlanError("the prices file lacks rds_proxy_vcpu_hour (RDS Proxy, per vCPU-hour)")
    return max(PROXY_LEAST_VCPUS, INSTANCE_VCPUS[instance]) * usd["rds_proxy_vcpu_hour"]


def proxy_line(connections: Budget, usd: dict[str, float], hours: float) -> dict[str, float]:
    """The bill's line for RDS Proxy, when the budget put one in front."""
    if not connections.proxy:
        return {}
    return {"RDS Proxy": proxy_hourly(connections.instance, usd) * hours}
