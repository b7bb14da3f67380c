"""A trivial ASGI endpoint (200, a small JSON body, no database): what `bench selfcheck` drives to
find the generator's own ceiling, and the bare app `python -m bench.yardstick` holds /next
against — served then by `python -m bench.trivial`, on granian with numerator's own server
settings (infra.run.server.serve) and its workers' GC tuning."""

from __future__ import annotations

import argparse
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


def served() -> Any:
    """The granian factory of `main`: the app, in a worker tuned as numerator's are."""
    from infra.run.server import tune_gc

    tune_gc()
    return app


def main() -> None:
    from infra.run.server import serve
    from infra.settings import Settings

    parser = argparse.ArgumentParser(description="serve the bare ASGI app (bench/trivial.py)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8082)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    # The same server settings as `numerator serve` reads from this environment.
    serve("bench.trivial:served", args.host, args.port, args.workers, Settings.from_env())


if __name__ == "__main__":
    main()
