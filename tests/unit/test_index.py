"""The page at / (functions/index.py): every route the app serves is on it, from the OpenAPI
document, and it loads nothing from anywhere."""

from __future__ import annotations

import re

from starlette.routing import Route

from functions.app import create_app
from functions.index import page, rendered
from functions.openapi import served


def test_every_route_the_app_serves_is_on_the_page() -> None:
    app = create_app().app
    html = rendered(app)
    routed = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    listed = set(re.findall(r"<tr><td><code>(\w+)</code></td><td><code>([^<]+)</code>", html))
    assert routed == listed
    for link in ("/openapi.json", "/healthz", "/metrics"):
        assert f'href="{link}"' in html


def test_the_page_loads_nothing_and_escapes_what_it_shows() -> None:
    app = create_app().app
    html = rendered(app)
    assert "<script" not in html and "src=" not in html and "@import" not in html
    assert not re.search(r"(href|src)=\"(https?:)?//", html), "no link off this service"
    odd = {**served(app), "paths": {"/x": {"get": {"summary": "<b>bold</b>"}}}}
    assert "&lt;b&gt;bold&lt;/b&gt;" in page(odd)


def test_code_in_a_summary_is_shown_as_code_not_backticks() -> None:
    """Issue 54: the page showed "`count`" with its backticks."""
    html = rendered(create_app().app)
    assert "<code>count</code>" in html and "`" not in html.split("<h2>Try it</h2>")[0]
    odd = {**served(create_app().app), "paths": {"/x": {"get": {"summary": "a ` alone <i>"}}}}
    assert "a ` alone &lt;i&gt;" in page(odd)
