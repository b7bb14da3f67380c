"""GET /: a small page for a person who opens the service's address in a browser — what this is,
its routes (read from the OpenAPI document, so that the two cannot drift) and where to go on.

The page is static and offline: no script, no stylesheet or font from elsewhere, nothing about
the counters or keys. It is open like /openapi.json, and its Content-Security-Policy lets it load
nothing and be framed by no one.
"""

from __future__ import annotations

from html import escape
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

LINKS = (
    ("/openapi.json", "the OpenAPI 3.1 document: every route, body and problem"),
    ("/healthz", "health: 200 when numerator can hand out values, else 503 naming what cannot"),
    ("/metrics", "Prometheus metrics (text)"),
)
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;"
    "color:#222}code,pre{font:13px ui-monospace,monospace;background:#f4f4f4;padding:0 .2rem}"
    "pre{padding:.6rem;overflow-x:auto}table{border-collapse:collapse;width:100%}"
    "td,th{text-align:left;padding:.2rem .6rem;border-bottom:1px solid #ddd;vertical-align:top}"
)
EXAMPLE = """\
export NUMERATOR_URL=http://THIS-ADDRESS   # the numerator command's default: http://127.0.0.1:8080
numerator counters create inv --template 'INV-{yyyy}-{value:06d}' --reset yearly
numerator next inv                         # INV-2026-000001
curl -X POST $NUMERATOR_URL/counters/inv/next"""


def inline(text: str) -> str:
    """Markdown's inline code (the OpenAPI summaries': "`count` consecutive values") as HTML,
    the rest escaped."""
    parts = escape(text).split("`")
    if len(parts) % 2 == 0:  # an odd backtick: shown as it is
        return escape(text)
    return "".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts))


def routes(schema: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(method, path, summary) of every operation in the OpenAPI document, in its order."""
    return [
        (method.upper(), path, str(operation.get("summary", "")))
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
    ]


def page(schema: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td><code>{escape(method)}</code></td><td><code>{escape(path)}</code></td>"
        f"<td>{inline(summary)}</td></tr>"
        for method, path, summary in routes(schema)
    )
    links = "".join(
        f'<li><a href="{href}"><code>{href}</code></a>: {escape(what)}</li>' for href, what in LINKS
    )
    info = schema["info"]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>numerator</title><style>{STYLE}</style></head><body>"
        f"<h1>numerator {escape(info['version'])}</h1>"
        f"<p>{escape(info['description'])} Clients take values over this HTTP API, with the "
        "<code>numerator</code> command or its Python client.</p>"
        f"<ul>{links}</ul>"
        f"<h2>Try it</h2><pre>{escape(EXAMPLE)}</pre>"
        "<p>Before the first API key exists, numerator serves programs on its own machine "
        "without one; after, every client sends <code>Authorization: Bearer nmr_…</code> "
        "(the command line: <code>--key</code> or <code>NUMERATOR_KEY</code>).</p>"
        f"<h2>Routes</h2><table><tr><th>method</th><th>path</th><th>what it does</th></tr>"
        f"{rows}</table></body></html>"
    )


def rendered(app: Starlette) -> str:
    """The page of `app`, made at its first ask and kept in its state."""
    made: str | None = getattr(app.state, "index", None)
    if made is None:
        from functions.openapi import served

        made = app.state.index = page(served(app))
    return made


async def index(request: Request) -> Response:
    return HTMLResponse(rendered(request.app), headers=HEADERS)
