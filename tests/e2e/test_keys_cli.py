"""`numerator keys` as a user runs it: against `numerator up` over the API (the first key from
the service's own machine), and straight on Postgres; protected mode seen from another address."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.e2e.service import Service

pytestmark = pytest.mark.slow


def numerator(*args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NUMERATOR_KEY"}
    if key:
        env["NUMERATOR_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "numerator", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def own_address() -> str:
    """This machine's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))
        except OSError:
            return "127.0.0.1"
        return str(probe.getsockname()[0])


def test_the_first_key_is_made_from_this_machine_and_then_every_client_needs_one() -> None:
    address = own_address()
    service = Service("--ephemeral", "--host", "0.0.0.0")
    try:
        if address.startswith("127."):
            pytest.skip("this machine has no address but loopback to be a remote client from")
        remote = f"http://{address}:{service.port}"
        refused = httpx.get(remote + "/counters")
        assert refused.status_code == 401
        assert "numerator keys create" in refused.json()["detail"]
        assert httpx.get(remote + "/healthz").status_code == 200

        made = numerator("keys", "create", "ops", "--scope", "admin", "--url", service.url)
        assert made.returncode == 0, made.stderr
        secret = next(w for w in made.stdout.split() if w.startswith("nmr_"))
        assert "shown this once" in made.stdout
        assert f"export NUMERATOR_KEY={secret}" in made.stdout and "--key" in made.stdout

        started = time.monotonic()
        while numerator("counters", "list", "--url", service.url).returncode == 0:
            assert time.monotonic() - started < 5, "loopback still served without a key"
            time.sleep(0.2)
        denied = numerator("counters", "list", "--url", service.url)
        assert "401" in denied.stderr and secret not in denied.stderr
        assert "NUMERATOR_KEY" in denied.stderr and "--key" in denied.stderr, denied.stderr

        created = numerator("counters", "create", "inv", "--url", remote, key=secret)
        assert created.returncode == 0, created.stderr
        billing = numerator(
            "keys", "create", "billing", "--scope", "next:inv*", "--url", remote, key=secret
        )
        billing_secret = next(w for w in billing.stdout.split() if w.startswith("nmr_"))
        taken = numerator("next", "inv", "--url", remote, key=billing_secret)
        assert taken.returncode == 0 and taken.stdout.strip() == "1", taken.stderr
        forbidden = numerator("counters", "create", "po", "--url", remote, key=billing_secret)
        assert forbidden.returncode == 1 and "403" in forbidden.stderr

        listed = numerator("keys", "list", "--url", service.url, key=secret)
        assert "ops" in listed.stdout and "billing" in listed.stdout
        assert secret not in listed.stdout and billing_secret not in listed.stdout
        revoked = numerator("keys", "revoke", "billing", "--url", service.url, key=secret)
        assert revoked.returncode == 0 and "revoked" in revoked.stdout
        assert numerator("next", "inv", "--url", service.url, key=billing_secret).returncode == 1
    finally:
        service.stop()
    assert "WARNING: listening on 0.0.0.0 with no API key" in service.output
    assert secret not in service.output


def test_keys_straight_on_postgres(fresh_database: str) -> None:
    made = numerator("keys", "create", "ops", "--scope", "admin", "--database-url", fresh_database)
    assert made.returncode == 0, made.stderr
    assert any(w.startswith("nmr_") for w in made.stdout.split())
    again = numerator("keys", "create", "ops", "--scope", "read", "--database-url", fresh_database)
    assert again.returncode == 1 and "exists" in again.stderr
    bad = numerator("keys", "create", "x", "--scope", "root", "--database-url", fresh_database)
    assert bad.returncode == 1 and "not a scope" in bad.stderr
    listed = numerator("keys", "list", "--json", "--database-url", fresh_database)
    assert '"name": "ops"' in listed.stdout and "nmr_" not in listed.stdout
    gone = numerator("keys", "revoke", "ops", "--database-url", fresh_database)
    assert gone.returncode == 0, gone.stderr
    missing = numerator("keys", "revoke", "ops", "--database-url", fresh_database)
    assert missing.returncode == 1 and "no unrevoked key" in missing.stderr
