"""The latency budget of `numerator plan`: each hop of a /next request on the AWS path, for each
edge, in milliseconds, and the p50 and p95 they add up to.

Each figure is AWS's documented one where there is one (latency.json names its source), numerator's
own setting where the setting decides the hop (how often a shard is read, the frames, when the
edge reads a reply), or what `numerator plan --measure` measured here (a commit). The batcher's
wait for its read is half the read interval (it reads each shard on the beats of READ_INTERVAL_MS,
AWS allowing five reads a second), or with enhanced fan-out the propagation AWS documents; the
edge reads the reply a lag after that beat (infra/adapters/beats.py), then a beat apart; a
server edge takes it pushed by the batcher once committed (REPLY_PUSH), without the table. The
Lambda edge's shards are read on phased beats (READ_BEATS=phased, as template.yaml deploys it): a
record waits a put's margin and half the gap between two shards' phases, fewer ms the more shards.
A server edge's requests wait in its front frame instead, which closes a put's margin before the
batchers' next read (FRONT_FRAME_POLICY=beats): half the gap between two frames on average, a
beat's on shared beats, a gap between phases' on phased ones (its default since 2026-12-05).

A wait for a beat or a frame is spread evenly over its gap: its hop's `spread`, whose mean is
half of it. The p95 is that of the sum of those even waits, the other hops at their figures:
AWS publishes no percentile of its calls, so a call's p95 is taken at its typical time (a
call slower than that makes the p95 longer than the plan's). `SERVER_P95_MS` is what the plan
sizes the server edge's shards for: on phased beats each shard more brings the next read nearer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from infra.adapters.beats import reply_lag
from infra.adapters.kinesis import PUT_GUARD_S
from infra.settings import FrontPolicy, ReadBeats, Settings
from numerator.plan.model import EdgeKind, PlanError, front_frames_per_s, read_wait

LATENCY = Path(__file__).with_name("latency.json")
SERVER_P95_MS = 60.0
"""The server edge's p95 the plan sizes its shards for (phased beats): the seed's 50 ms a call
and the load balancer's and the push's few."""
MOST_SHARDS = 64  # the most shards the plan adds for a p95 (else it says what it reaches)


@dataclass(frozen=True)
class Hop:
    """`ms`: the hop's mean; `spread`: the width of the even wait in it (a beat's, a frame's),
    0 for a hop taken at its figure."""

    name: str
    ms: float
    source: str
    spread: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out = {"hop": self.name, "ms": round(self.ms, 1), "source": self.source}
        return {**out, "spread_ms": round(self.spread, 1)} if self.spread else out


@cache
def figures(path: Path = LATENCY) -> dict[str, dict[str, Any]]:
    """The figures latency.json holds, read once a process (`budget` runs for every shard count
    `server_shards` tries, at every rate the plan's advice tries)."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise PlanError(f"cannot read the latency figures {path}: {exc}") from exc
    return dict(data["figures"])


def found_after(arrives_s: float, lag_s: float, interval_s: float) -> float:
    """When the edge reads a reply that is in the table `arrives_s` after the beat that read its
    record: at the first of its reads (`lag_s` after the beat, then a beat apart) not before it."""
    due = lag_s
    while due < arrives_s:
        due += interval_s
    return due


def budget(
    edge: EdgeKind, settings: Settings, commit_ms: float, fan_out: bool = False, shards: int = 1
) -> list[Hop]:
    """The hops of one request on `edge` (numerator's two edges; not the atomic counter) on a
    stream of `shards`: the Lambda edge's are read on phased beats (template.yaml)."""
    if edge is EdgeKind.ATOMIC:
        raise PlanError("the atomic counter has no hops of numerator's")
    got = figures()
    kinesis, dynamodb = got["kinesis_call_ms"]["ms"], got["dynamodb_call_ms"]["ms"]
    frames, aws = settings.frames, settings.aws
    hops: list[Hop] = []
    if edge is EdgeKind.SERVER:
        hops += [
            Hop("the load balancer", got["alb_ms"]["ms"], got["alb_ms"]["source"]),
            front_hop(settings, fan_out, shards),
            Hop("the put", kinesis, got["kinesis_call_ms"]["source"] + " (PutRecords)"),
        ]
    else:
        lam = got["api_gateway_lambda_ms"]
        hops += [
            Hop("API Gateway and Lambda", lam["ms"], lam["source"]),
            Hop("the put", kinesis, got["kinesis_call_ms"]["source"] + " (PutRecord)"),
        ]
    read = read_hop(edge, settings, got, fan_out, shards)
    write = got["dynamodb_call_ms"]["source"]
    after = [
        Hop("the frame (auto)", frames.frame_min_ms, "FRAME_MIN_MS: the least gap after a commit"),
        Hop("the commit", commit_ms, "one commit, measured here by numerator plan --measure"),
    ]
    if edge is EdgeKind.SERVER and settings.edge.reply_push != "off":
        # the batcher pushes the replies once committed; the table's write and read are for
        # what a push does not reach (infra/adapters/push.py)
        push = got["vpc_datagram_ms"]
        return [
            *hops,
            read,
            *after,
            Hop("the push (a datagram to the edge)", push["ms"], push["source"]),
        ]
    after.append(Hop("the reply write (BatchWriteItem)", dynamodb, write))
    # from the beat (or the push): the GetRecords, then the frame, the commit and the write
    arrives = ((0 if fan_out else kinesis) + sum(h.ms for h in after)) / 1000
    waited = found_after(arrives, reply_lag(settings), aws.read_interval_ms / 1000) - arrives
    reading = Hop(
        "the reply read (Query, or BatchGetItem)",
        waited * 1000 + dynamodb,
        "the edge's reads (infra/adapters/beats.py: BACK_FRAME_MS and REPLY_LAG_MS after the "
        "beat that reads the record, then a beat apart) after the reply is written, and a read",
    )
    return [*hops, read, *after, reading]


def front_hop(settings: Settings, fan_out: bool, shards: int) -> Hop:
    """A server edge's front frame: on the beats, half the gap between two frames (one at each
    read of any shard, at most one a FRONT_FRAME_MS); with fixed frames (and with fan-out, which
    has no reads to close on) half FRONT_FRAME_MS."""
    edge, aws = settings.edge, settings.aws
    if fan_out or edge.front_frame_policy is not FrontPolicy.BEATS:
        return Hop(
            "the front frame",
            edge.front_frame_ms / 2,
            "half of FRONT_FRAME_MS",
            edge.front_frame_ms,
        )
    phased = aws.read_beats is ReadBeats.PHASED
    fronts = front_frames_per_s(
        shards, aws.read_interval_ms / 1000, edge.front_frame_ms / 1000, "beats", phased
    )
    return Hop(
        "the front frame (beats: until the next read)",
        1000 / fronts / 2,
        f"half the gap between two front frames: {fronts:.0f} a second, at the reads of "
        f"{shards} shard(s){' on phased beats' if phased else ''}, at most one a "
        f"FRONT_FRAME_MS ({edge.front_frame_ms:g})",
        1000 / fronts,
    )


def read_hop(
    edge: EdgeKind, settings: Settings, got: dict[str, dict[str, Any]], fan_out: bool, shards: int
) -> Hop:
    """The batcher's read: fan-out's push; a server edge's beats front frame's margin (its wait
    for the read was in the frame); phased beats' margin and half the gap between the shards'
    phases; shared beats' half interval; and a GetRecords."""
    kinesis, aws = got["kinesis_call_ms"]["ms"], settings.aws
    if fan_out:
        efo = got["kinesis_efo_propagation_ms"]
        return Hop("the batcher's read (enhanced fan-out)", efo["ms"], efo["source"])
    # the put's margin: twice its deviation (`put_times`' first guess: half a call) and a guard
    margin = kinesis + PUT_GUARD_S * 1000
    if edge is EdgeKind.SERVER and settings.edge.front_frame_policy is FrontPolicy.BEATS:
        return Hop(
            "the batcher's read (GetRecords)",
            margin + kinesis,
            "a put's margin (the front frame closes that long before the read), and a GetRecords",
        )
    if edge is EdgeKind.LAMBDA or aws.read_beats is ReadBeats.PHASED:
        wait = read_wait(aws.read_interval_ms, shards, phased=True)
        return Hop(
            "the batcher's read (GetRecords)",
            margin + wait + kinesis,
            f"a put's margin, half the gap between {shards} shards' phases of READ_INTERVAL_MS "
            f"({aws.read_interval_ms:g}; READ_BEATS=phased), and a GetRecords",
            2 * wait,
        )
    wait = read_wait(aws.read_interval_ms, 1, phased=False)
    return Hop(
        "the batcher's read (GetRecords)",
        wait + kinesis,
        f"half of READ_INTERVAL_MS ({aws.read_interval_ms:g}), and a GetRecords",
        2 * wait,
    )


def p50(hops: list[Hop]) -> float:
    """The hops' means added up (their waits' even spreads make it the mean, near the median)."""
    return sum(h.ms for h in hops)


def p95(hops: list[Hop], q: float = 0.95) -> float:
    """The `q` quantile of the hops' sum: each even wait over its spread (convolved on a grid
    of 0.1 ms), the rest at their figures."""
    fixed = sum(h.ms - h.spread / 2 for h in hops)
    spreads = [h.spread for h in hops if h.spread > 0]
    if not spreads:
        return fixed
    step = 0.1
    density = [1.0]
    for width in spreads:
        cells = max(1, round(width / step))
        out = [0.0] * (len(density) + cells - 1)
        for i, mass in enumerate(density):  # the sum so far, plus an even wait of `cells`
            if mass:
                share = mass / cells
                for j in range(cells):
                    out[i + j] += share
        density = out
    running = 0.0
    for cell, mass in enumerate(density):
        running += mass
        if running >= q - 1e-12:
            return fixed + (cell + 1) * step
    return fixed + len(density) * step


def server_shards(settings: Settings, commit_ms: float, least: int) -> int:
    """The fewest shards, `least` or more, at which the server edge's p95 is within
    SERVER_P95_MS on phased beats; `least` where none up to MOST_SHARDS is (or on shared beats,
    where more shards bring the read no nearer). Not always the next shard up: frames are kept
    one a FRONT_FRAME_MS at most, so reads closer than that are taken every second or third."""
    if settings.aws.read_beats is not ReadBeats.PHASED:
        return least
    for shards in range(max(1, least), max(least, MOST_SHARDS) + 1):
        if p95(budget(EdgeKind.SERVER, settings, commit_ms, shards=shards)) <= SERVER_P95_MS:
            return shards
    return least
