"""A TCP relay in a thread: a port on one address that passes each connection on to a service
listening elsewhere. `numerator sam-local` puts moto and the embedded Postgres (loopback, and a
unix socket) where a function's container reaches them: the Docker bridge's address."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

Target = str | tuple[str, int]  # a unix socket's path, or a host and port


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def _open(target: Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if isinstance(target, str):
        return await asyncio.open_unix_connection(target)
    return await asyncio.open_connection(*target)


@contextmanager
def relay(host: str, target: Target, port: int = 0) -> Iterator[int]:
    """A TCP port on `host` (`port`, or a free one) relaying each connection to `target`, for
    the block; yields the port."""
    loop = asyncio.new_event_loop()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await _open(target)
        except OSError:
            writer.close()  # the client sees its connection closed, as if nothing listened
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except asyncio.CancelledError:  # stopping: end without an error (Python 3.11's stream
            writer.close()  # callback reports a cancelled connection's task as one)
            up_writer.close()

    async def stop() -> None:
        server.close()
        # The connections' tasks first: from Python 3.12 wait_closed() waits for them to end.
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    server = loop.run_until_complete(asyncio.start_server(serve, host, port))
    thread = threading.Thread(target=loop.run_forever, name="relay", daemon=True)
    thread.start()
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
