"""The ledger from the command line, against a running service: `numerator void`, `numerator
counters report`, `numerator audit verify|export` (docs/invoices.md)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from typing import Any

from infra import trail
from numerator import client, console


def run_void(args: argparse.Namespace) -> None:
    call = client.Calls.void(args.name, args.reason, args.values, None, None, args.period)
    made = console.service(args).send(console.raw(call))
    spans = ", ".join(span(v) for v in made["voided"])
    where = f"{args.name} {made['period']}" if made["period"] else args.name
    console.show(made, args.json, [f"void in {where}: {spans}"])


def run_confirm(args: argparse.Namespace) -> None:
    call = client.Calls.confirm(args.name, args.values, None, None, args.period)
    made = console.service(args).send(console.raw(call))
    where = f"{args.name} {made['period']}" if made["period"] else args.name
    spans = ", ".join(span(v) for v in made["confirmed"])
    console.show(made, args.json, [f"confirmed in {where}: {spans}"])


def span(values: dict[str, int]) -> str:
    first, last = values["first"], values["last"]
    return str(first) if first == last else f"{first}-{last}"


def period_params(args: argparse.Namespace) -> dict[str, str]:
    return {"period": args.period} if args.period is not None else {}


def run_report(args: argparse.Namespace) -> None:
    call = client.Calls.report(args.name, args.period)
    found = console.service(args).send(call)
    if args.csv:
        print(report_csv(found), end="")
        return
    console.show(found, args.json, report_lines(found))
    if found.get("breaches"):
        raise SystemExit(1)


def report_lines(found: dict[str, Any]) -> list[str]:
    period = f" {found['period']}" if found["period"] else ""
    issued = f"values {found['first']} to {found['last']}" if found["issued"] else "no values yet"
    lines = [
        f"{found['counter']}{period}: {issued}",
        f"  issued      {found['issued']}",
        f"  delivered   {found['delivered']}",
    ]
    for reason, count in found["voided"].items():
        lines.append(f"  void        {count}  {reason}")
    for void in found["voids"]:
        lines.append(f"    {span(void):<12} {void['reason']}  {void['at']}  {void['who']}")
    if found["unsure"]:
        lines.append(f"  unsure      {found['unsure']}  (may not have reached their clients)")
    for run in found["unsure_runs"]:
        key = f"  Idempotency-Key {run['idempotency_key']}" if run["idempotency_key"] else ""
        lines.append(f"    {span(run):<12} edge {run['edge']}  {run['at']}  {run['who']}{key}")
    pruned = found["trail"]["pruned"]
    if pruned:
        lines.append(f"  pruned      {pruned[0]}-{pruned[1]} (past their retention)")
    gaps = ", ".join(f"{a}-{b}" for a, b in found["gaps"]) or "none"
    if "confirmed" in found:
        lines.append(f"  confirmed   {found['confirmed']}")
        lines.append(f"  awaiting    {found['awaiting_confirmation']} (confirmation)")
    lines.append(f"  unexplained {found['unexplained_gaps']} ({gaps})")
    if found["issued_twice"]:
        lines.append(f"  TWICE       {found['issued_twice']}")
    lines.append("  order       " + ("rises with allocation time" if found["rising"] else "BROKEN"))
    lines += [f"  BREACH      {breach}" for breach in found.get("breaches", ())]
    return lines


def report_csv(found: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["kind", "first", "last", "reason", "at", "who"])
    if found["issued"]:
        writer.writerow(["issued", found["first"], found["last"], "", "", ""])
    for void in found["voids"]:
        writer.writerow(
            ["void", void["first"], void["last"], void["reason"], void["at"], void["who"]]
        )
    for run in found["unsure_runs"]:
        writer.writerow(["unsure", run["first"], run["last"], "edge died", run["at"], run["who"]])
    if found["trail"]["pruned"]:
        writer.writerow(["pruned", *found["trail"]["pruned"], "retention", "", ""])
    for first, last in found["gaps"]:
        writer.writerow(["gap", first, last, "unexplained", "", ""])
    return out.getvalue()


def run_verify(args: argparse.Namespace) -> None:
    params = {"counter": args.name} if args.name else {}
    talk = console.service(args, console.TRAIL_DEADLINE_S)
    if args.heads is None:
        found = console.call(talk, "GET", "/audit/verify", params=params, ok=(409,))
    else:
        text = args.heads.read_text()
        given = anchors(text)
        found = merged(
            [
                console.call(talk, "POST", "/audit/verify", params=params, ok=(409,), json=part)
                for part in parts(given, prunes(text))
            ],
            [b.to_json() for b in trail.conflicts(trail.anchors_of(given))],
        )
    if found["ok"]:
        lines = [f"sound: {found['rows']} rows in {found['chains']} chain(s)"]
    else:
        lines = [f"BROKEN: {len(found['breaches'])} breach(es)"]
        for bad in found["breaches"]:
            chain = f" of chain {bad['chain']}" if bad.get("chain") else ""
            lines.append(f"  {bad['table']} row {bad['row']}{chain}: {bad['why']}")
    if "anchors" in found:
        held, pruned = found["anchors"]["held"], found["anchors"]["pruned"]
        lines.append(f"  anchored heads held in {len(held)} chain(s), pruned past in {len(pruned)}")
        lines += [f"    pruned past its anchor: {chain}" for chain in pruned]
    lines += [f"  head {chain}  row {h['row']}  {h['hash']}" for chain, h in found["heads"].items()]
    console.show(found, args.json, lines)
    if not found["ok"]:
        raise SystemExit(1)


def anchors(text: str) -> list[dict[str, Any]]:
    """Every head in a file: one JSON object ({"heads": ...}, as `audit heads --json` prints),
    or JSON lines of them (an anchor sink's file, or its bucket's objects one after another),
    as {"chain", "row", "hash", "at", "by"}: each distinct head once, named by the first record
    that holds it. Not only each chain's newest: a rewrite that a batcher anchored after the
    true head would make the newest a forged one, and the earlier heads show it."""
    found: dict[tuple[str, int, str], dict[str, Any]] = {}
    for record in records(text):
        for chain, head in (record.get("heads") or {}).items():
            said = {k: str(record[k]) for k in ("at", "by") if record.get(k)}
            one = {"chain": chain, "row": head["row"], "hash": head["hash"], **said}
            found.setdefault((chain, head["row"], head["hash"]), one)
    if not found:
        raise SystemExit("no heads in that file")
    return [found[k] for k in sorted(found)]


def records(text: str) -> list[dict[str, Any]]:
    """The records of a heads file: JSON objects one after another — one object or array, JSON
    lines, or a bucket's objects put together by `cat heads/*.json` (each without a newline
    at its end) — or a one-sentence exit naming where the file stops being JSON."""
    out: list[dict[str, Any]] = []
    decoder, at = json.JSONDecoder(), 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return out
        try:
            found, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise SystemExit(
                f"the heads file is not JSON at line {exc.lineno}: {exc.msg}"
            ) from None
        items = found if isinstance(found, list) else [found]
        if not all(isinstance(r, dict) for r in items):
            raise SystemExit("the heads file holds something other than JSON objects")
        out.extend(items)


def prunes(text: str) -> dict[str, dict[str, Any]] | None:
    """Each chain's newest anchored prune in an anchor sink's records ({chain: {"after_id",
    "after_hash"}}), which `chain_starts` must agree with; None for a file no batcher wrote
    (`audit heads --json`: a snapshot of heads holds no prunes)."""
    found = records(text)
    if not any(r.get("by") for r in found):
        return None
    out: dict[str, dict[str, Any]] = {}
    for record in found:
        for chain, start in (record.get("starts") or {}).items():
            if chain not in out or start["after_id"] > out[chain]["after_id"]:
                out[chain] = {"after_id": start["after_id"], "after_hash": start["after_hash"]}
    return out


PART_BYTES = 15_000  # a request's body is at most MAX_BODY_BYTES (16 KiB by default)


def parts(
    given: list[dict[str, Any]], starts: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The request bodies that carry every head, as many as fit in PART_BYTES each, each with
    the prunes."""
    more = {} if starts is None else {"starts": starts}
    room = PART_BYTES - len(json.dumps(more))
    out: list[dict[str, Any]] = []
    part: list[dict[str, Any]] = []
    used = 0
    for head in given:
        size = len(json.dumps(head)) + 2
        if part and used + size > room:
            out.append({"heads": part, **more})
            part, used = [], 0
        part.append(head)
        used += size
    return [*out, {"heads": part, **more}] if part else out


def merged(found: list[dict[str, Any]], conflicts: list[dict[str, Any]]) -> dict[str, Any]:
    """Several verifies' answers (one per part of the heads) as one, with the conflicts
    between anchors that fell into different parts."""
    out = dict(found[0])
    breaches = {json.dumps(b, sort_keys=True): b for f in found for b in f["breaches"]}
    breaches.update({json.dumps(b, sort_keys=True): b for b in conflicts})
    pruned = sorted({c for f in found for c in f["anchors"]["pruned"]})
    bad = {b.get("chain") for b in breaches.values()}
    held = sorted({c for f in found for c in f["anchors"]["held"]} - bad)
    out.update(
        ok=not breaches,
        breaches=list(breaches.values()),
        first_bad=next(iter(breaches.values()), None),
        anchors={"held": held, "pruned": pruned},
    )
    return out


def run_heads(args: argparse.Namespace) -> None:
    found = console.call(console.service(args), "GET", "/audit/heads")
    lines = [
        f"{chain}  row {h['row']}  {h['hash']}  {h['at']}" for chain, h in found["heads"].items()
    ]
    console.show(found, args.json, lines or ["no audit rows yet"])


def run_export(args: argparse.Namespace) -> None:
    params = {**period_params(args), "format": "csv" if args.csv else "json"}
    talk = console.service(args, console.TRAIL_DEADLINE_S)
    text = console.call(talk, "GET", f"/counters/{args.name}/audit", params=params, text=True)
    if not args.csv:
        text = json.dumps(json.loads(text), indent=2) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
