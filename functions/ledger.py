"""The ledger's routes: voids, the completeness report, the audit export and its verification,
and a counter's retention (docs/invoices.md).

A void travels as a record on the stream, as /next does, so that the batcher checks it against
what was handed out in the same transaction that writes it into the frame's audit row: the hash
chains cover voids as they cover allocations.
"""

from __future__ import annotations

import csv
import io
import re
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from functions import validation
from functions.edge import Edge
from functions.fastpath import answer_problem, put_and_wait, replied
from functions.problems import Kind, Problem, invalid
from functions.routes import JSON, edge_of
from infra import ledger
from infra.counters import Counter, check_retention
from infra.errors import InvalidCounter
from infra.observe.health import EDGE_DEAD_S
from infra.wire import MAX_VALUE, MAX_VOID, Confirm, Void, reply_key

REASON = re.compile(r"[^\x00-\x1f\x7f]{1,200}")
PERIOD = re.compile(r"|[0-9]{4}(-[0-9]{2}(-[0-9]{2})?)?")
MAX_VALUES = 500  # a body of 500 values of 19 digits stays under MAX_BODY_BYTES


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


def void_ranges(body: dict[str, Any]) -> list[tuple[int, int]]:
    """The contiguous ranges a void's body names: `values` (a list), or `first` and `last`."""
    values, first, last = body.get("values"), body.get("first"), body.get("last", body.get("first"))
    if values is not None:
        if "first" in body or "last" in body:  # a `last` beside values was ignored once
            raise invalid("values", "give values, or first and last, not both")
        if not isinstance(values, list) or not 1 <= len(values) <= MAX_VALUES:
            raise invalid("values", f"must be a list of 1 to {MAX_VALUES} values")
        if not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_VALUE for v in values
        ):
            raise invalid("values", f"each value must be a whole number from 0 to {MAX_VALUE}")
        spans: list[tuple[int, int]] = []
        for value in sorted(set(values)):
            if spans and spans[-1][1] + 1 == value:
                spans[-1] = (spans[-1][0], value)
            else:
                spans.append((value, value))
        return spans
    for field, number in (("first", first), ("last", last)):
        if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number <= MAX_VALUE:
            raise invalid(field, f"must be a whole number from 0 to {MAX_VALUE} (or values: [...])")
    assert isinstance(first, int) and isinstance(last, int)
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


async def mark(request: Request, kind: type[Void]) -> Response:
    """Void or confirm values: one record per contiguous range, each answered by the batcher
    in its frame's transaction."""
    edge = edge_of(request)
    body = await validation.json_body(request, edge.settings)
    if not isinstance(body, dict):
        raise invalid("body", 'must be a JSON object: {"values": [...], ...}')
    fields = {"values", "first", "last", "period"} | ({"reason"} if kind is Void else set())
    unknown = sorted(set(body) - fields)
    if unknown:
        raise invalid(unknown[0], "unknown field")
    reason = body.get("reason") if kind is Void else "confirm"
    if kind is Void:
        if not isinstance(reason, str) or not REASON.fullmatch(reason):
            raise invalid("reason", "must be 1 to 200 characters, no control characters")
        if ledger.reserved(reason):
            raise invalid("reason", f"{reason!r} is numerator's own reason; say why in your words")
    counter = await counter_of(edge, request.path_params["name"])
    period = period_of(counter, body.get("period"), edge)
    spans = void_ranges(body)
    assert isinstance(reason, str)
    who = request.scope.get("numerator.who", "")
    timeout = edge.timeout(request.scope.get("aws.context"))
    sent = time.time()
    done, refused = [], None
    for first, last in spans:
        deadline = sent + edge.budget(timeout)
        record = kind(reply_key(), counter.name, first, last, reason, period, who, deadline, sent)
        reply = await replied(put_and_wait(edge, record, timeout), edge.settings.edge.retry_after_s)
        if reply.error is not None:
            refused = answer_problem(reply, edge.settings.edge.retry_after_s)
            break
        done.append({"first": first, "last": last})
    what = "voided" if kind is Void else "confirmed"
    if refused is not None:
        refused.extra[what] = done
        raise refused
    body = {"counter": counter.name, "period": period, what: done}
    if kind is Void:
        body["reason"] = reason
    return JSON(body)


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
    anchors = None
    if request.method == "POST":
        body = await validation.json_body(request, edge.settings)
        anchors = anchored_heads(body)
    found = await edge.store.verify(name, anchors)
    return JSON(found, status_code=200 if found["ok"] else 409)


HASH = re.compile(r"[0-9a-f]{64}")


def anchored_heads(body: object) -> dict[str, dict[str, Any]]:
    """The heads of a verify request: {"heads": {chain: {"row": id, "hash": hex}}}, as
    `numerator audit heads --json` prints them and the anchor sinks keep them."""
    heads = body.get("heads") if isinstance(body, dict) else None
    if not isinstance(heads, dict) or not heads:
        raise invalid("heads", 'must be {"heads": {chain: {"row": id, "hash": hex}, ...}}')
    for chain, head in heads.items():
        row = head.get("row") if isinstance(head, dict) else None
        digest = head.get("hash") if isinstance(head, dict) else None
        if not isinstance(row, int) or isinstance(row, bool) or not 0 < row <= MAX_VALUE:
            raise invalid("heads", f"{chain}: row must be a whole number")
        if not isinstance(digest, str) or not HASH.fullmatch(digest):
            raise invalid("heads", f"{chain}: hash must be 64 hex digits")
        if not isinstance(head.get("at", ""), str):
            raise invalid("heads", f"{chain}: at, when given, must be the head's time as text")
    return heads


async def heads(request: Request) -> Response:
    """GET /audit/heads: each chain's head (row, hash, time): what to keep outside Postgres."""
    edge = edge_of(request)
    return JSON({"heads": await edge.store.heads()})


async def update(request: Request) -> Response:
    """PATCH /counters/{name}: change what may change, its retention (`retention_days`)."""
    edge = edge_of(request)
    name = validation.name(request.path_params["name"])
    body = await validation.json_body(request, edge.settings)
    if not isinstance(body, dict) or set(body) != {"retention_days"}:
        raise invalid("body", 'only the retention may change: {"retention_days": N or null}')
    try:
        days = check_retention(body["retention_days"])
    except InvalidCounter as exc:
        raise invalid(exc.field, exc.problem) from None
    counter = await edge.store.set_retention(name, days)
    if counter is None:
        raise Problem(Kind.COUNTER_NOT_FOUND, f"no counter named {name!r}")
    return JSON(counter.to_json())
