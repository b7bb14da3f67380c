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


def next_scope(path: str, **fields: object) -> dict[str, object]:
    """The ASGI scope of a POST `path` from 127.0.0.1, as a server hands it to an app called
    directly (`fields` change or add to it: `http_version="2"`)."""
    return {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
        "scheme": "http",
        **fields,
    }
