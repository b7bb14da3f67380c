"""`numerator counters …` and `numerator next …`: the API for people, against a running service."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"


class ClientError(Exception):
    pass


def call(url: str, method: str, path: str, **kwargs: Any) -> Any:
    try:
        response = httpx.request(method, url.rstrip("/") + path, timeout=30, **kwargs)
    except httpx.HTTPError as exc:
        raise ClientError(f"cannot reach numerator at {url}: {exc}") from None
    body = response.json() if response.content else None
    if response.status_code >= 400:
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
    if "value" in counter:
        period = f" in period {counter['period']}" if counter.get("period") else ""
        value = counter["value"] if counter["value"] is not None else "none yet"
        lines.append(f"  last      {value}{period}")
    return lines


def create(url: str, as_json: bool, **fields: Any) -> None:
    body = {k: v for k, v in fields.items() if v is not None}
    counter = call(url, "POST", "/counters", json=body)
    show(counter, as_json, ["created " + describe(counter)[0], *describe(counter)[1:]])


def get(url: str, name: str, as_json: bool) -> None:
    counter = call(url, "GET", f"/counters/{name}")
    show(counter, as_json, describe(counter))


def listing(url: str, limit: int, after: str | None, as_json: bool) -> None:
    params: dict[str, Any] = {"limit": limit}
    if after:
        params["after"] = after
    page = call(url, "GET", "/counters", params=params)
    lines = [f"{c['name']:<32} {c['template']:<28} {c['reset']}" for c in page["counters"]]
    if not lines:
        lines = ["no counters"]
    if page["next"]:
        lines.append(f"(more: --after {page['next']})")
    show(page, as_json, lines)


def next_values(url: str, name: str, count: int, key: str | None, as_json: bool) -> None:
    headers = {"Idempotency-Key": key} if key else {}
    params = {"count": count} if count != 1 else {}
    body = call(url, "POST", f"/counters/{name}/next", params=params, headers=headers)
    lines = [v["formatted"] for v in body["values"]] if "values" in body else [body["formatted"]]
    show(body, as_json, lines)


def fail(message: str) -> NoReturn:
    print(f"numerator: {message}", file=sys.stderr)
    raise SystemExit(1)
