"""moto server, answering one request at a time: the local stand-in for Kinesis and DynamoDB.

moto's backends are not safe for concurrent requests. Two PutRecord calls on one shard at once can
be given the same sequence number (moto 5's `Shard.put_record` says "not safe for concurrency"):
both are acknowledged, and one record is lost. Measured here, 16 threads putting 200 records each
into `python -m moto.server`: 3,072 of 3,200 records stored. A lost record is a request that never
gets its reply (504), which Kinesis never does to an acknowledged put, so the stand-in must not
either. Requests are still read and written by a thread each; only moto's own work is taken in
turn, and it holds the GIL anyway.

`python -m numerator.motoserver -p PORT` is what `numerator up --aws moto` runs; the tests run
`server()` in a thread.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server
from werkzeug.wsgi import get_input_stream


class OneAtATime:
    """A WSGI app that lets one request at a time into the app it wraps."""

    def __init__(self, app: Any) -> None:
        self.app, self.lock = app, threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        # The body is read before the lock: a client that sent its headers but not yet its body
        # (urllib3 2 sends them apart; a batcher SIGSTOPped between the two) would hold it, and
        # every other client's call would wait for it.
        body = get_input_stream(environ).read()
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
        with self.lock:
            return list(self.app(environ, start_response))  # the body is made inside the lock


def server(host: str, port: int) -> BaseWSGIServer:
    """moto server on `host:port`, a thread per connection, one request at a time in moto."""
    os.environ.setdefault("MOTO_PORT", str(port))  # moto writes it into URLs it hands out
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    app = OneAtATime(DomainDispatcherApplication(create_backend_app))
    return make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m numerator.motoserver", description=__doc__)
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(argv)
    running = server(args.host, args.port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        running.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        running.server_close()


if __name__ == "__main__":
    main()
