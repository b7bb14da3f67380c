"""The ledger from the command line, against a running service: `numerator void`, `numerator
counters report`, `numerator audit verify|export` (docs/invoices.md)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from typing import Any

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
    found = console.call(console.service(args), "GET", "/audit/verify", params=params, ok=(409,))
    if found["ok"]:
        lines = [f"sound: {found['rows']} rows in {found['chains']} chain(s)"]
    else:
        bad = found["first_bad"]
        lines = [f"BROKEN at row {bad['row']} of chain {bad['chain']}: {bad['why']}"]
    lines += [f"  head {chain}  {head}" for chain, head in found["heads"].items()]
    console.show(found, args.json, lines)
    if not found["ok"]:
        raise SystemExit(1)


def run_export(args: argparse.Namespace) -> None:
    params = {**period_params(args), "format": "csv" if args.csv else "json"}
    talk = console.service(args)
    text = console.call(talk, "GET", f"/counters/{args.name}/audit", params=params, text=True)
    if not args.csv:
        text = json.dumps(json.loads(text), indent=2) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
