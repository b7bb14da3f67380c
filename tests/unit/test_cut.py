"""The exact cut (numerator.cut) against a small server whose answer, and what it does when its
client half-closes, each test sets: an answer that crossed the client's leaving is read and
counted delivered; one written after the server could know is not; a server that closes at the
client's leaving (as granian does) leaves the request cut."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from numerator import cut
from numerator.cut import CROSSING_S, Exchange, answer, exchange, request
from tests.history import Client

BODY = b'{"counter":"c","value":7,"formatted":"7"}'
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(BODY)).encode()
    + b"\r\nconnection: close\r\n\r\n"
    + BODY
)


@asynccontextmanager
async def serving(answer_after: float, at_leaving: str) -> AsyncIterator[int]:
    """A server that answers `answer_after` seconds after a request, and when its client
    half-closes first: "close" (at once, as granian), "answer" (at once: its answer was on its
    way), or "late" (answers 0.3 s after: it could have known)."""

    handlers: list[asyncio.Task[None]] = []

    async def answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            await asyncio.wait_for(reader.read(1), answer_after)
        except TimeoutError:  # the client is still there
            writer.write(ANSWER)
        else:  # the client left
            if at_leaving == "answer":
                writer.write(ANSWER)
            elif at_leaving == "late":
                await asyncio.sleep(0.3)
                writer.write(ANSWER)
        with contextlib.suppress(OSError):
            await writer.drain()

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await answering(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(one, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]
        await asyncio.gather(*handlers)


async def sent(answer_after: float, at_leaving: str, cut_s: float | None) -> Exchange:
    async with serving(answer_after, at_leaving) as port:
        return await exchange(port, request(port, "/counters/c/next"), cut_s, 5.0)


def test_an_answer_before_the_cut_is_read() -> None:
    got = asyncio.run(sent(0.01, "close", 0.2))
    assert got.cut_s is None and not got.crossed
    assert answer(got.raw)[0] == 200 and answer(got.raw)[2] == BODY


def test_a_server_that_closes_as_its_client_leaves_leaves_the_request_cut() -> None:
    got = asyncio.run(sent(1.0, "close", 0.05))
    assert got.raw == b"" and not got.crossed
    assert got.cut_s is not None and 0.05 <= got.cut_s < 0.5


def test_an_answer_that_crossed_the_cut_is_read_and_delivered() -> None:
    got = asyncio.run(sent(1.0, "answer", 0.05))
    assert got.crossed and got.cut_s is None, got
    assert answer(got.raw)[2] == BODY


def test_an_answer_written_after_the_server_could_know_is_no_crossing() -> None:
    assert CROSSING_S < 0.3
    got = asyncio.run(sent(1.0, "late", 0.05))
    assert got.raw == b"" and not got.crossed and got.cut_s is not None


@pytest.mark.parametrize("at_leaving, delivered", [("answer", True), ("close", False)])
def test_the_history_counts_a_crossed_answer_delivered(at_leaving: str, delivered: bool) -> None:
    """The recorded history's client: a request whose answer crossed its cut got its value (on
    the code before, it closed outright and recorded a cut the service could not see)."""

    async def run() -> Client:
        async with serving(1.0, at_leaving) as port:
            client = Client(port, ["c"], keyed=0.0, batch=0.0, cut_ms=(50, 50), seed=1)
            await client.attempt("c", 1, None)
            return client

    (a,) = asyncio.run(run()).history
    assert a.delivered is delivered and a.crossed is delivered
    assert (a.cut_ms is None) is delivered
    if delivered:
        assert a.values == (7,)


def test_an_answer_whose_first_byte_came_at_the_cut_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A byte of the answer in the socket at the cut (`waiting`; here made so, the answer
    itself coming 0.2 s later): the client reads the answer (on the code before, it raised
    "no answer within" and the history broke rule h)."""
    monkeypatch.setattr(cut, "waiting", lambda writer: True)
    got = asyncio.run(sent(0.2, "close", 0.05))
    assert got.cut_s is None and not got.crossed
    assert answer(got.raw)[2] == BODY
