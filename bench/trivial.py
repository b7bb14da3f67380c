"""A trivial ASGI endpoint (200, a small JSON body, no database): what `bench selfcheck` drives to
find the generator's own ceiling."""

from __future__ import annotations

from typing import Any

BODY = b'{"ok":true}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"11")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def factory() -> Any:
    return app
