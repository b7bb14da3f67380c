"""`numerator counters …` and `numerator next …`: the API for people, against a running service."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any, NoReturn

from numerator.client import Call, Calls, Client, T, as_sent

CLI_DEADLINE_S = 5.0
"""A person waits this long for a command, retries included (the library's calls wait 60 s)."""


def service(args: argparse.Namespace) -> Client:
    """The client a command talks through: its --url and --key."""
    return Client(args.url, args.key, deadline=CLI_DEADLINE_S)


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
    """The JSON body of the answer (its text, with `text`); a Problem for a 4xx or 5xx answer
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
    if counter.get("confirm") == "required":
        lines.append("  confirm   required")
    if counter.get("retention_days"):
        lines.append(f"  retention {counter['retention_days']} days after each period")
    if "value" in counter:
        period = f" in period {counter['period']}" if counter.get("period") else ""
        value = counter["value"] if counter["value"] is not None else "none yet"
        lines.append(f"  last      {value}{period}")
    return lines


def create(client: Client, as_json: bool, name: str, **fields: Any) -> None:
    counter = client.send(raw(Calls.create(name, fields)))
    show(counter, as_json, ["created " + describe(counter)[0], *describe(counter)[1:]])


def get(client: Client, name: str, as_json: bool) -> None:
    counter = client.send(raw(Calls.get(name)))
    show(counter, as_json, describe(counter))


def listing(client: Client, limit: int, after: str | None, as_json: bool) -> None:
    page = client.send(raw(Calls.page(limit, after)))
    lines = [f"{c['name']:<32} {c['template']:<28} {c['reset']}" for c in page["counters"]]
    if not lines:
        lines = ["no counters"]
    if page["next"]:
        lines.append(f"(more: --after {page['next']})")
    show(page, as_json, lines)


def next_values(client: Client, name: str, count: int, key: str | None, as_json: bool) -> None:
    """Values of `name`; under an Idempotency-Key (`key`, or one made here) that the client's
    retries send again, so that a retried call takes no second value."""
    body = client.send(raw(Calls.next(name, count, key)))
    lines = [v["formatted"] for v in body["values"]] if "values" in body else [body["formatted"]]
    show(body, as_json, lines)


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
            "use it as: Authorization: Bearer <secret>, or NUMERATOR_KEY=<secret> for this CLI",
        ]
    show(key, as_json, lines)


def show_keys(keys: list[dict[str, Any]], as_json: bool) -> None:
    show({"keys": keys}, as_json, [describe_key(k) for k in keys] or ["no keys"])


def fail(message: str) -> NoReturn:
    print(f"numerator: {message}", file=sys.stderr)
    raise SystemExit(1)
