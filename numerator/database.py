"""Postgres for `numerator up` and the bench: DATABASE_URL when given, else an embedded server
(pgserver) keeping its files in a data directory."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Postgres:
    url: str
    pids: list[int] = field(default_factory=list)  # the server's, when it runs here


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(base) / "numerator"


@contextmanager
def embedded(data_dir: Path) -> Iterator[Postgres]:
    """Start (or join) the embedded Postgres keeping its files under `data_dir`. The server stops
    when the block ends."""
    import pgserver

    pgdata = data_dir / "pgdata"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    try:
        pid = server.get_pid()
        yield Postgres(str(server.get_uri()), [pid] if pid else [])
    finally:
        server.cleanup()


@contextmanager
def ephemeral() -> Iterator[Postgres]:
    """An embedded Postgres in a temporary folder, deleted when the block ends."""
    folder = Path(tempfile.mkdtemp(prefix="numerator-"))
    try:
        with embedded(folder) as postgres:
            yield postgres
    finally:
        shutil.rmtree(folder, ignore_errors=True)
