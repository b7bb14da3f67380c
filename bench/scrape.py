"""Read a service's /metrics into plain numbers."""

from __future__ import annotations

import httpx


def parse(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            values[name] = float(value)
        except ValueError:
            continue
    return values


def scrape(base: str, client: httpx.Client | None = None) -> dict[str, float]:
    response = (client or httpx).get(base.rstrip("/") + "/metrics", timeout=10)
    response.raise_for_status()
    return parse(response.text)
