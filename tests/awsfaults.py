"""An HTTP proxy in front of an AWS endpoint (moto server) that can refuse DynamoDB's reply
calls the way AWS refuses a caller without the permission: BatchGetItem, Query (a long-running
edge's read of its replies) and BatchWriteItem answer HTTP 400 with DynamoDB's
AccessDeniedException body. Everything else passes through.

    python -m tests.awsfaults UPSTREAM_PORT PORT

A process of its own, so that it shares no GIL with the test's clients: SIGUSR1 starts the
refusals, SIGUSR2 ends them (`AwsFaults` in the test does both).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from contextlib import suppress

from infra.run.process import wait_ready
from infra.run.server import free_port

REFUSED = frozenset(
    f"DynamoDB_20120810.{call}" for call in ("BatchGetItem", "Query", "BatchWriteItem")
)
DENIED = json.dumps(
    {
        "__type": "com.amazon.coral.service#AccessDeniedException",
        "message": "User: arn:aws:iam::123456789012:user/test is not authorized to perform: "
        "dynamodb:BatchWriteItem (injected by tests.awsfaults)",
    }
).encode()


class Refusing:
    on = False
    refused = 0


async def read_head(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str]]:
    head = await reader.readuntil(b"\r\n\r\n")
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    return head, headers


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> tuple[bytes, bool]:
    """The body as it came (chunks kept), and whether the connection ends with it."""
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"])), False
    if "chunked" in headers.get("transfer-encoding", ""):
        out = b""
        while True:
            size = await reader.readuntil(b"\r\n")
            n = int(size.split(b";")[0], 16)
            out += size + await reader.readexactly(n + 2)
            if n == 0:
                return out, False
    return await reader.read(), True


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: int) -> None:
    up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream)
    try:
        while True:
            try:
                head, headers = await read_head(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if Refusing.on and headers.get("x-amz-target") in REFUSED:
                Refusing.refused += 1
                writer.write(
                    b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/x-amz-json-1.0\r\n"
                    + f"content-length: {len(DENIED)}\r\n\r\n".encode()
                    + DENIED
                )
                await writer.drain()
                continue
            up_writer.write(head + body)
            await up_writer.drain()
            answer, answer_headers = await read_head(up_reader)
            rest, ends = await read_body(up_reader, answer_headers)
            writer.write(answer + rest)
            await writer.drain()
            if ends or answer_headers.get("connection", "").lower() == "close":
                return
    except (asyncio.IncompleteReadError, ConnectionError):
        return
    finally:
        up_writer.close()
        writer.close()


async def serve(upstream: int, port: int) -> None:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def turn(on: bool) -> None:
        Refusing.on = on
        print(f"refusing {'on' if on else 'off'} ({Refusing.refused} refused)", flush=True)

    loop.add_signal_handler(signal.SIGUSR1, turn, True)
    loop.add_signal_handler(signal.SIGUSR2, turn, False)
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, upstream), "127.0.0.1", port, backlog=1024
    )
    async with server:
        await stopping.wait()


class AwsFaults:
    """The proxy as a child process in front of `upstream` (a URL on loopback)."""

    def __init__(self, upstream: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        upstream_port = upstream.rsplit(":", 1)[1].rstrip("/")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.awsfaults", upstream_port, str(self.port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_ready(self.process, self.url + "/moto-api/", "the fault proxy", patience=30)

    def refuse(self, on: bool) -> None:
        self.process.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)

    def stop(self) -> str:
        self.process.terminate()
        with suppress(subprocess.TimeoutExpired):
            out, _ = self.process.communicate(timeout=10)
            return out
        self.process.kill()
        return self.process.communicate()[0]


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), int(sys.argv[2])))
