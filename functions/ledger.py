"""The ledger's routes: voids, the completeness report, the audit export and its verification,
and a counter's retention (docs/invoices.md).

A void travels as a record on the stream, as /next does, so that the batcher checks it against
what was handed out in the same transaction that writes it into the frame's audit row: the hash
chains cover voids as they cover allocations.
"""

from __future__ import annotations

import asyncio
import csv
import io
import re
import time
import unicodedata
from typing import Any

import msgspec
from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from functions import bodies, validation
from functions.answers import JSON, edge_of
from functions.edge import Edge
from functions.fastpath import answer_problem, put_and_wait, replied
from functions.problems import Kind, Problem, invalid
from infra import ledger
from infra.counters import Counter
from infra.observe.health import EDGE_DEAD_S
from infra.trail import Anchor, Start, anchors_of
from infra.wire import MAX_VOID, Confirm, Void, reply_key

REASON = re.compile(bodies.REASON)
PERIOD = re.compile(bodies.PERIOD)
HASH = re.compile(bodies.HASH)


async def counter_of(edge: Edge, raw: str) -> Counter:
    name = validation.name(raw)
    counter = await edge.store.get(name)
    if counter is None:
        raise Problem(Kind.COUNTER_NOT_FOUND, f"no counter named {name!r}")
    return counter


def period_of(counter: Counter, raw: object, edge: Edge) -> str:
    if raw is None:
        return counter.period(edge.clock())
    if not isinstance(raw, str) or not PERIOD.fullmatch(raw):
        raise invalid("period", "must be '' (never reset), YYYY, YYYY-MM or YYYY-MM-DD")
    refused = counter.reset.refuses(raw)
    if refused is not None:
        # a yearly counter has no period 2026-12: answering it "no values, 0 unexplained"
        # would read as an all-clear for a period that cannot hold values
        raise invalid("period", f"counter {counter.name!r} resets {counter.reset.value}: {refused}")
    return raw


def void_ranges(body: bodies.Confirmation) -> list[tuple[int, int]]:
    """The contiguous ranges a void's body names: `values`, or `first` and `last` (default
    first); a 422 for both, or neither (the schema's oneOf)."""
    values, first, last = body.values, body.first, body.last
    if values is not UNSET:
        if first is not UNSET or last is not UNSET:  # a `last` beside values was ignored once
            raise invalid("values", "give values, or first and last, not both")
        spans: list[tuple[int, int]] = []
        for value in sorted(set(values)):
            if spans and spans[-1][1] + 1 == value:
                spans[-1] = (spans[-1][0], value)
            else:
                spans.append((value, value))
        return spans
    if first is UNSET:
        raise invalid("first", "give values: [...], or first (and last)")
    last = first if last is UNSET else last
    if not 0 <= last - first < MAX_VOID:
        raise invalid("last", f"a void takes 1 to {MAX_VOID} values, first to last")
    return [(first, last)]


async def void(request: Request) -> Response:
    """POST /counters/{name}/void: take values out of use, for a reason. Idempotent: the same
    void again answers the same; a value never handed out, or void for another reason, is 409."""
    return await mark(request, Void)


async def confirm(request: Request) -> Response:
    """POST /counters/{name}/confirm: say values were used, so that they are final (a counter
    created with "confirm": "required"; the others answer 409). Idempotent."""
    return await mark(request, Confirm)


async def mark(request: Request, kind: type[Void] | type[Confirm]) -> Response:
    """Void or confirm values: one record per contiguous range, put together and each answered
    by the batcher in its frame's transaction; a refusal names the ranges that were done."""
    edge = edge_of(request)
    model = bodies.VoidBody if kind is Void else bodies.Confirmation
    body = validation.checked(model, await validation.json_body(request, edge.settings))
    # A reason is kept as NFKC makes it: one spelling for what reads the same (fullwidth, ﬁ).
    reason = (
        unicodedata.normalize("NFKC", body.reason)
        if isinstance(body, bodies.VoidBody)
        else "confirm"
    )
    if isinstance(body, bodies.VoidBody):
        # the model's pattern is searched, so a reason ending in a newline would pass it
        if not REASON.fullmatch(reason):
            raise invalid("reason", "must be 1 to 200 characters, no control characters")
        if ledger.reserved(reason):
            raise invalid("reason", f"{reason!r} is numerator's own reason; say why in your words")
    counter = await counter_of(edge, request.path_params["name"])
    period = period_of(counter, None if body.period is UNSET else body.period, edge)
    spans = void_ranges(body)
    who = request.scope.get("numerator.who", "")
    timeout = edge.timeout(request.scope.get("aws.context"))
    sent = time.time()
    deadline = sent + edge.budget(timeout)
    retry_after = edge.settings.edge.retry_after_s
    # The ranges are asked for together, each its own record: one frame answers them all within
    # one timeout (in turn, a timeout each, the later ones outlived their deadline).
    records = [
        Void(reply_key(), counter.name, first, last, reason, period, who, deadline, sent)
        if kind is Void
        else Confirm(reply_key(), counter.name, first, last, period, who, deadline, sent)
        for first, last in spans
    ]
    answers = await asyncio.gather(
        *(replied(put_and_wait(edge, record, timeout), retry_after) for record in records),
        return_exceptions=True,
    )
    done, refused = [], None
    for (first, last), got in zip(spans, answers, strict=True):
        if isinstance(got, Problem):
            refused = refused or got
        elif isinstance(got, BaseException):
            raise got
        elif got.error is not None:
            refused = refused or answer_problem(got, retry_after)
        else:
            done.append({"first": first, "last": last})
    what = "voided" if kind is Void else "confirmed"
    if refused is not None:
        refused.extra[what] = done
        raise refused
    answer: dict[str, Any] = {"counter": counter.name, "period": period, what: done}
    if kind is Void:
        answer["reason"] = reason
    return JSON(answer)


async def report(request: Request) -> Response:
    """GET /counters/{name}/report?period=P: the completeness report of a period."""
    edge = edge_of(request)
    counter = await counter_of(edge, request.path_params["name"])
    period = period_of(counter, request.query_params.get("period"), edge)
    links, pruned = await edge.store.trail(counter.name)
    voids = ledger.voids(links, counter.name, period)
    allocated = await edge.store.allocated(counter.name, period)
    confirmed = ledger.confirmed(links, counter.name, period) if counter.confirm else None
    dead = await dead_edges(edge, links, counter.name, period)
    body = ledger.report(
        counter, period, allocated, links, voids, pruned.get(period), confirmed, dead
    )
    return JSON(body)


async def dead_edges(
    edge: Edge, links: list[ledger.Link], counter: str, period: str
) -> dict[str, ledger.EdgeEnd]:
    """The edges that asked for the period's values and died (for the `unsure` values)."""
    return await edge.store.dead_edges(ledger.edges(links, counter, period), EDGE_DEAD_S)


async def audit(request: Request) -> Response:
    """GET /counters/{name}/audit?period=P&format=json|csv: the export an auditor keeps."""
    edge = edge_of(request)
    counter = await counter_of(edge, request.path_params["name"])
    period = period_of(counter, request.query_params.get("period"), edge)
    form = request.query_params.get("format", "json")
    if form not in ("json", "csv"):
        raise invalid("format", "must be json or csv")
    links, _ = await edge.store.trail(counter.name)
    voids = ledger.voids(links, counter.name, period)
    dead = await dead_edges(edge, links, counter.name, period)
    rows = ledger.export(counter.name, period, links, voids, dead)
    if form == "json":
        return JSON({"counter": counter.name, "period": period, "rows": rows})
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=ledger.EXPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8")


async def verify(request: Request) -> Response:
    """GET /audit/verify?counter=NAME: check the hash chains (those holding the counter's
    rows, or all) and the tables beside them against the chains; POST with {"heads": {...}},
    heads anchored earlier, also proves the chains still hold them and only extend them.
    200 when sound, 409 naming each table and row that is not."""
    edge = edge_of(request)
    name = request.query_params.get("counter")
    if name is not None:
        validation.name(name)
    anchors, starts = None, None
    if request.method == "POST":
        body = await validation.json_body(request, edge.settings)
        anchors, starts = anchored_heads(body)
    found = await edge.store.verify(name, anchors, starts)
    return JSON(found, status_code=200 if found["ok"] else 409)


def anchored_heads(body: object) -> tuple[list[Anchor], dict[str, Start] | None]:
    """The heads of a verify request: {"heads": {chain: {"row": id, "hash": hex}}}, as
    `numerator audit heads --json` prints them, or {"heads": [{"chain", "row", "hash", "at",
    "by"}, ...], "starts": {chain: {"after_id", "after_hash"}}}, every head of an anchor sink's
    records and each chain's newest anchored prune (`numerator audit verify --heads`)."""
    checked = validation.checked(bodies.Heads, body)
    heads = checked.heads
    starts = None
    if checked.starts is not UNSET:
        for chain, start in checked.starts.items():
            if not HASH.fullmatch(start.after_hash):
                raise invalid("starts", f"{chain}: after_hash must be 64 hex digits")
        starts = {
            c: Start(s.after_id, bytes.fromhex(s.after_hash)) for c, s in checked.starts.items()
        }
    given = (
        [{"chain": c, **msgspec.to_builtins(h)} for c, h in heads.items()]
        if isinstance(heads, dict)
        else [msgspec.to_builtins(h) for h in heads]
    )
    for head in given:
        if not HASH.fullmatch(head["hash"]):  # searched by the model: "…\n" would pass it
            raise invalid("heads", f"{head['chain']}: hash must be 64 hex digits")
    return anchors_of(given), starts


async def heads(request: Request) -> Response:
    """GET /audit/heads: each chain's head (row, hash, time): what to keep outside Postgres."""
    edge = edge_of(request)
    return JSON({"heads": await edge.store.heads()})


async def update(request: Request) -> Response:
    """PATCH /counters/{name}: change what may change, its retention (`retention_days`)."""
    edge = edge_of(request)
    name = validation.name(request.path_params["name"])
    body = await validation.json_body(request, edge.settings)
    days = validation.checked(bodies.RetentionChange, body).retention_days
    counter = await edge.store.set_retention(name, days)
    if counter is None:
        raise Problem(Kind.COUNTER_NOT_FOUND, f"no counter named {name!r}")
    return JSON(counter.to_json())
