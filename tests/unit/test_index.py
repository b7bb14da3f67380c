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
