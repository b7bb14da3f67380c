"""The local moto server lets one request at a time into moto, whose backends are not safe for
concurrent requests (two PutRecord calls on one shard can be given one sequence number)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from numerator.motoserver import OneAtATime


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
        bodies = list(pool.map(lambda i: b"".join(app({"PATH_INFO": f"/{i}"}, _ignore)), range(16)))
    assert inside.most == 1
    assert bodies == [f"made /{i}".encode() for i in range(16)]  # the whole body, in the lock


def test_without_it_they_would_overlap() -> None:
    """The check above can fail: the same requests without OneAtATime are inside together."""
    inside = Inside()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: b"".join(inside({"PATH_INFO": f"/{i}"}, _ignore)), range(16)))
    assert inside.most > 1


def _ignore(status: str, headers: list[tuple[str, str]]) -> None:
    return None
