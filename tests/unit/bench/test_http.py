from __future__ import annotations

import asyncio

import pytest

from bench.http import HttpError, HttpPool, _parse


def test_content_length_response() -> None:
    raw = bytearray(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhiHTTP/1.1")
    assert _parse(raw) == (200, b"hi", len(raw) - len(b"HTTP/1.1"))


def test_chunked_response_and_partial_reads() -> None:
    raw = b"HTTP/1.1 503 No\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    for cut in range(len(raw) - 1):
        assert _parse(bytearray(raw[:cut])) is None
    assert _parse(bytearray(raw)) == (503, b"abcde", len(raw))


def test_garbage_is_a_bad_response() -> None:
    with pytest.raises(HttpError):
        _parse(bytearray(b"nonsense\r\n\r\n"))


class Server:
    """A loopback HTTP server that answers each request after `delay` (a request for /hang
    never; /close hangs up), recording how many requests it held at once."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.held = 0
        self.most = 0
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                path = head.split(b" ")[1]
                if path == b"/close":
                    return
                self.held += 1
                self.most = max(self.most, self.held)
                await asyncio.sleep(3600 if path == b"/hang" else self.delay)
                self.held -= 1
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def serve(delay: float) -> tuple[Server, asyncio.Server, str]:
    server = Server(delay)
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    return server, listening, f"http://127.0.0.1:{port}"


async def test_requests_beyond_the_limit_wait_for_a_free_connection() -> None:
    server, listening, url = await serve(0.02)
    client = HttpPool(url, 4)
    raw = client.build("POST", "/x")
    answers: list[tuple[int, int, bytes]] = []
    all_in = asyncio.Event()

    def done(tag: int, status: int, body: bytes, _: HttpError | None) -> None:
        answers.append((tag, status, body))
        if len(answers) == 40:
            all_in.set()

    for n in range(40):
        client.submit(raw, 5, n, done)
    assert client.waiting == 40  # none is written before a connection opens
    await asyncio.wait_for(all_in.wait(), 10)
    client.close()
    listening.close()
    assert sorted(tag for tag, _, _ in answers) == list(range(40))
    assert {(status, body) for _, status, body in answers} == {(200, b"ok")}
    assert server.most == 4 and server.connections == 4  # kept alive, never more than the limit


async def test_a_request_times_out_and_its_connection_is_replaced() -> None:
    _, listening, url = await serve(0.0)
    client = HttpPool(url, 1)
    errors: list[str] = []
    client.submit(client.build("GET", "/hang"), 0.2, None, lambda *a: errors.append(a[3].kind))
    assert await client.send(client.build("GET", "/fine"), 5) == (200, b"ok")
    client.close()
    listening.close()
    assert errors == ["timeout"]  # /fine waited for the one connection, then got a new one


async def test_a_hang_up_is_an_error_not_a_wait() -> None:
    _, listening, url = await serve(0.0)
    client = HttpPool(url, 2)
    with pytest.raises(HttpError) as raised:
        await client.send(client.build("GET", "/close"), 5)
    assert raised.value.kind == "disconnected"
    assert await client.send(client.build("GET", "/after"), 5) == (200, b"ok")
    client.close()
    listening.close()


async def test_a_refused_connection_fails_its_request() -> None:
    _, listening, url = await serve(0.0)
    listening.close()
    await listening.wait_closed()
    client = HttpPool(url, 2)
    with pytest.raises(HttpError) as raised:
        await client.send(client.build("GET", "/x"), 5)
    assert raised.value.kind == "connect"
    assert client.opened == 0
