"""`numerator audit verify` against a service that takes longer than a person's 5 s to check a
whole trail (10 s was seen on a busy server): it waits for the answer (TRAIL_DEADLINE_S), not
'cannot reach numerator'."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator

import pytest

from numerator import console
from numerator.cli import main

pytestmark = pytest.mark.slow  # it waits past the 5 s a person's command has

SLOW_S = console.CLI_DEADLINE_S + 1.0


class Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        time.sleep(SLOW_S)
        head = {"row": 3, "hash": "ab" * 32, "at": "2026-12-05T17:00:00Z"}
        found = {"ok": True, "rows": 3, "chains": 1, "breaches": [], "heads": {"s/0/plain": head}}
        body = json.dumps(found).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def slow_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_audit_verify_waits_for_a_trail_that_takes_longer_than_a_command(
    slow_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert console.TRAIL_DEADLINE_S > SLOW_S
    main(["audit", "verify", "--url", slow_url])
    assert "sound: 3 rows in 1 chain(s)" in capsys.readouterr().out
