"""The local moto server lets one request at a time into moto, whose backends are not safe for
concurrent requests (two PutRecord calls on one shard can be given one sequence number)."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from infra.run.server import free_port
from numerator.motoserver import OneAtATime, server


class Inside:
    """A WSGI app that counts how many requests are inside it at once, and takes a while."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        start_response("200 OK", [])
        yield b"made "
        time.sleep(0.02)  # a GIL switch is due every 5 ms: the other threads would come in
        with self.lock:
            self.now -= 1
        yield environ["PATH_INFO"].encode()


def test_requests_from_many_threads_enter_moto_one_at_a_time() -> None:
    inside = Inside()
    app = OneAtATime(inside)
    with ThreadPoolExecutor(8) as pool:
        bodies = list(pool.map(lambda i: b"".join(app(_environ(i), _ignore)), range(16)))
    assert inside.most == 1
    assert bodies == [f"made /{i}".encode() for i in range(16)]  # the whole body, in the lock


def test_without_it_they_would_overlap() -> None:
    """The check above can fail: the same requests without OneAtATime are inside together."""
    inside = Inside()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: b"".join(inside(_environ(i), _ignore)), range(16)))
    assert inside.most > 1


def test_a_client_that_has_not_sent_its_body_keeps_no_one_out() -> None:
    """A client stopped between its headers and its body (urllib3 2 sends them apart; the sam
    test SIGSTOPs a batcher) holds no lock: another client's call is answered meanwhile."""
    import boto3
    from botocore.config import Config

    port = free_port()
    running = server("127.0.0.1", port)
    threading.Thread(target=running.serve_forever, daemon=True).start()
    try:
        config = Config(read_timeout=2, retries={"total_max_attempts": 1})
        kinesis = boto3.client(
            "kinesis",
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
            config=config,
        )
        kinesis.list_streams()  # moto's Kinesis backend made
        with socket.create_connection(("127.0.0.1", port)) as stopped:
            stopped.sendall(
                b"POST / HTTP/1.1\r\nHost: moto\r\nX-Amz-Target: Kinesis_20131202.ListStreams\r\n"
                b"Content-Type: application/x-amz-json-1.1\r\nContent-Length: 2\r\n\r\n"
            )
            time.sleep(0.2)  # its headers read, its body awaited
            began = time.monotonic()
            kinesis.list_streams()
            assert time.monotonic() - began < 1.0
    finally:
        running.shutdown()
        running.server_close()


def _environ(i: int) -> dict[str, Any]:
    return {"PATH_INFO": f"/{i}", "wsgi.input": io.BytesIO(), "CONTENT_LENGTH": "0"}


def _ignore(status: str, headers: list[tuple[str, str]]) -> None:
    return None
