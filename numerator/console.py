"""`numerator counters …` and `numerator next …`: the API for people, against a running service."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from typing import Any

from infra.counters import ConfirmMode
from numerator.client import DEFAULT_URL, TIMEOUT_S, Call, Calls, Client, T
from numerator.client.calls import as_sent

CLI_DEADLINE_S = 5.0
"""A person waits this long for a command, retries included (the library's calls wait 60 s)."""
TRAIL_DEADLINE_S = 120.0
"""A command that reads or checks a whole audit trail (`audit verify`, `audit export`) waits
this long: /audit/verify over a few thousand rows took 10 s on a busy server, and 5 s said
'cannot reach' of a service that was answering."""


def service(args: argparse.Namespace, deadline: float = CLI_DEADLINE_S) -> Client:
    """The client a command talks through: its --url and --key, else $NUMERATOR_URL and
    $NUMERATOR_KEY; one try may take the whole `deadline` when it is the longer."""
    url = args.url or os.environ.get("NUMERATOR_URL") or DEFAULT_URL
    key = args.key or os.environ.get("NUMERATOR_KEY") or None
    return Client(url, key, deadline=deadline, timeout=max(deadline, TIMEOUT_S))


def raw(call: Call[T]) -> Call[Any]:
    """The same call, its answer read as the JSON the service sent (what --json prints)."""
    return replace(call, read=as_sent)


def call(
    client: Client,
    method: str,
    path: str,
    ok: tuple[int, ...] = (),
    text: bool = False,
    params: dict[str, Any] | None = None,
    json: Any = None,
) -> Any:
    """The JSON body of the answer (its text, with `text`); a StatusError for a 4xx or 5xx answer
    but for the statuses in `ok` (numerator.client, retried as its calls are)."""
    return client.send(Call(method, path, as_sent, params or {}, json, ok=ok, text=text))


def show(body: Any, as_json: bool, lines: list[str]) -> None:
    if as_json:
        print(json.dumps(body, indent=2))
    else:
        print("\n".join(lines))


def describe(counter: dict[str, Any]) -> list[str]:
    lines = [
        f"{counter['name']}",
        f"  template  {counter['template']}",
        f"  start     {counter['start']}",
        f"  reset     {counter['reset']} ({counter['timezone']})",
    ]
    if counter.get("confirm") == ConfirmMode.REQUIRED:
        lines.append("  confirm   required")
    if counter.get("retention_days"):
        lines.append(f"  retention {counter['retention_days']} days after each period")
    if "value" in counter:
        period = f" in period {counter['period']}" if counter.get("period") else ""
        value = counter["value"] if counter["value"] is not None else "none yet"
        lines.append(f"  last      {value}{period}")
    return lines


def run_create(args: argparse.Namespace) -> None:
    fields = {
        "start": args.start,
        "template": args.template,
        "reset": args.reset,
        "timezone": args.timezone,
        "retention_days": args.retention_days,
        "confirm": args.confirm,
    }
    counter = service(args).send(raw(Calls.create(args.name, fields)))
    show(counter, args.json, ["created " + describe(counter)[0], *describe(counter)[1:]])


def run_get(args: argparse.Namespace) -> None:
    counter = service(args).send(raw(Calls.get(args.name)))
    show(counter, args.json, describe(counter))


def run_list(args: argparse.Namespace) -> None:
    page = service(args).send(raw(Calls.page(args.limit, args.after)))
    lines = [f"{c['name']:<32} {c['template']:<28} {c['reset']}" for c in page["counters"]]
    if not lines:
        lines = ["no counters"]
    if page["next"]:
        lines.append(f"(more: --after {page['next']})")
    show(page, args.json, lines)


def run_next(args: argparse.Namespace) -> None:
    """Values of a counter; under an Idempotency-Key (--idempotency-key, or one made here) that
    the client's retries send again, so that a retried call takes no second value."""
    call = Calls.next(args.name, args.count, args.idempotency_key)
    body = service(args).send(raw(call))
    lines = [v["formatted"] for v in body["values"]] if "values" in body else [body["formatted"]]
    show(body, args.json, lines)


def describe_key(key: dict[str, Any]) -> str:
    state = f"revoked {key['revoked']}" if key["revoked"] else "live"
    used = key["last_used"] or "never"
    return f"{key['name']:<24} {key['id']}  {state:<14} last used {used}  {' '.join(key['scopes'])}"


def show_key(key: dict[str, Any], as_json: bool) -> None:
    """A key as `keys create` and `keys revoke` print it; the secret, if there, said once."""
    lines = [describe_key(key)]
    if "secret" in key:
        lines = [
            f"created key {key['name']} (id {key['id']}) with scopes {' '.join(key['scopes'])}",
            "its secret, shown this once (numerator keeps only a hash): store it now",
            key["secret"],
            "from now on every client needs a key, on this machine too (a command without one "
            "gets 401); send it:",
            f"  numerator's commands, its Python client: export NUMERATOR_KEY={key['secret']}",
            "  one command:                              numerator … --key <secret>",
            "  over HTTP:                                Authorization: Bearer <secret>",
        ]
    show(key, as_json, lines)


def show_keys(keys: list[dict[str, Any]], as_json: bool) -> None:
    show({"keys": keys}, as_json, [describe_key(k) for k in keys] or ["no keys"])
