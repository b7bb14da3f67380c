from __future__ import annotations

import pytest

from bench.http import HttpError, _parse


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
