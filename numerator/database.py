"""Postgres for `numerator up`: DATABASE_URL when given, else an embedded server (pgserver)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(base) / "numerator"


@contextmanager
def embedded(data_dir: Path) -> Iterator[str]:
    """Start (or join) the embedded Postgres keeping its files under `data_dir`; yield its URL.
    The server stops when the block ends."""
    import pgserver

    pgdata = data_dir / "pgdata"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()


@contextmanager
def ephemeral() -> Iterator[str]:
    """An embedded Postgres in a temporary folder, deleted when the block ends."""
    folder = Path(tempfile.mkdtemp(prefix="numerator-"))
    try:
        with embedded(folder) as url:
            yield url
    finally:
        shutil.rmtree(folder, ignore_errors=True)
