"""A trivial ASGI endpoint (200, a small JSON body, no database): what `bench selfcheck` drives to
find the generator's own ceiling, and the bare app `python -m bench.yardstick` holds /next
against — served then by `python -m bench.trivial`, on granian with numerator's own server
settings (infra.run.server.serve) and its workers' GC tuning.

Its `/batched` path is the floor of any service that answers from a shared frame, as /next does:
each request puts a future in the open frame and awaits it; the frame closes on the loop's next
turn, hands each of its requests the next number of one counter (in memory: no Postgres, no
record, no check) and wakes them; each answers `{"counter":"hot","value":N}`. What /batched costs
over `/` is what waiting for a frame costs in Python on this server, before any work is done in
it (`python -m bench.yardstick --floor`)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

BODY = b'{"ok":true}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"11")]
TYPED = [(b"content-type", b"application/json")]


class Gathering:
    """The open frame of `/batched`: its requests' futures, and the counter's last number."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[int]] = []
        self.last = 0

    async def take(self) -> int:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        if not self.waiting:
            loop.call_soon(self.close)
        self.waiting.append(future)
        return await future

    def close(self) -> None:
        waiting, self.waiting = self.waiting, []
        for future in waiting:
            self.last += 1
            future.set_result(self.last)


FRAME = Gathering()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"] == "/batched":
        body = b'{"counter":"hot","value":%d}' % await FRAME.take()
        await send({"type": "http.response.start", "status": 200, "headers": TYPED})
        await send({"type": "http.response.body", "body": body})
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
