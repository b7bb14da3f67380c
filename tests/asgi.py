"""An HTTP client on an ASGI app in this process: how most tests talk to a stack's app."""

from __future__ import annotations

import httpx
from starlette.types import ASGIApp

LOCAL = "http://127.0.0.1"


def asgi_client(
    app: ASGIApp,
    client: tuple[str, int] = ("127.0.0.1", 123),
    base_url: str = LOCAL,
    **options: object,
) -> httpx.AsyncClient:
    """An httpx client whose requests `app` answers in this process, as from `client`'s address
    (httpx's own default); use it as `async with asgi_client(stack.app()) as client:`."""
    transport = httpx.ASGITransport(app=app, client=client)
    return httpx.AsyncClient(transport=transport, base_url=base_url, **options)  # type: ignore[arg-type]
