"""`numerator counters …` and `numerator next …`: the API for people, against a running service."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, NoReturn

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"


class ClientError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Service:
    """Where the service is, and the API key to show it (none: loopback, before any key)."""

    url: str = DEFAULT_URL
    key: str | None = None


def call(
    service: Service,
    method: str,
    path: str,
    ok: tuple[int, ...] = (),
    text: bool = False,
    **kwargs: Any,
) -> Any:
    """The JSON body of the answer (its text, with `text`); a ClientError for a 4xx or 5xx
    answer, but for the statuses in `ok`."""
    headers = dict(kwargs.pop("headers", None) or {})
    if service.key:
        headers["Authorization"] = f"Bearer {service.key}"
    url = service.url
    try:
        response = httpx.request(
            method, url.rstrip("/") + path, timeout=30, headers=headers, **kwargs
        )
    except httpx.HTTPError as exc:
        raise ClientError(f"cannot reach numerator at {url}: {exc}") from None
    if text and response.is_success:
        return response.text
    body = response.json() if response.content else None
    if response.status_code >= 400 and response.status_code not in ok:
        if isinstance(body, dict) and "title" in body:
            detail = f": {body['detail']}" if body.get("detail") else ""
            raise ClientError(f"{response.status_code} {body['title']}{detail}")
        raise ClientError(f"{response.status_code} {response.text[:200]}")
    return body


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


def create(service: Service, as_json: bool, **fields: Any) -> None:
    body = {k: v for k, v in fields.items() if v is not None}
    counter = call(service, "POST", "/counters", json=body)
    show(counter, as_json, ["created " + describe(counter)[0], *describe(counter)[1:]])


def get(service: Service, name: str, as_json: bool) -> None:
    counter = call(service, "GET", f"/counters/{name}")
    show(counter, as_json, describe(counter))


def listing(service: Service, limit: int, after: str | None, as_json: bool) -> None:
    params: dict[str, Any] = {"limit": limit}
    if after:
        params["after"] = after
    page = call(service, "GET", "/counters", params=params)
    lines = [f"{c['name']:<32} {c['template']:<28} {c['reset']}" for c in page["counters"]]
    if not lines:
        lines = ["no counters"]
    if page["next"]:
        lines.append(f"(more: --after {page['next']})")
    show(page, as_json, lines)


def next_values(service: Service, name: str, count: int, key: str | None, as_json: bool) -> None:
    headers = {"Idempotency-Key": key} if key else {}
    params = {"count": count} if count != 1 else {}
    body = call(service, "POST", f"/counters/{name}/next", params=params, headers=headers)
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
