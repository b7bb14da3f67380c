"""numerator.Client and AsyncClient against a real `numerator up` (embedded, and the AWS path on
moto), behind a proxy that fails requests as networks do: a retry never takes a second value."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from numerator import AsyncClient, Client
from numerator.client import BadRequest, Forbidden, NotFound, Unauthorized, Unreachable
from tests.e2e.service import Service
from tests.proxy import Proxy, proxy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["embedded", "aws"])
def service(request: pytest.FixtureRequest) -> Iterator[Service]:
    args = ["--ephemeral"] if request.param == "embedded" else ["--aws", "moto", "--ephemeral"]
    with Service(*args) as running:
        yield running


@pytest.fixture
def front(service: Service) -> Iterator[Proxy]:
    with proxy(service.port) as running:
        yield running


def test_a_dropped_answer_is_retried_under_the_same_key_and_gets_the_same_values(
    service: Service, front: Proxy
) -> None:
    with Client(front.url) as numerator:
        numerator.create("drop", template="INV-{value:04d}")
        front.plan = ["drop"]
        got = numerator.next("drop")
        tries = front.next_requests()
        assert [t.done for t in tries] == ["drop", "pass"]
        assert tries[0].idempotency_key == tries[1].idempotency_key == got.idempotency_key
        assert (got.value, got.formatted) == (1, "INV-0001")

        front.plan = ["drop", "drop"]
        batch = numerator.next("drop", count=3)
        assert [v.value for v in batch.values] == [2, 3, 4]
        assert numerator.next("drop").value == 5, "no value was taken by a dropped try"
        report = numerator.report("drop")
    assert report["issued"] == 5 and report["unexplained_gaps"] == 0
    assert report["voided"] == {} and report["delivered"] == 5


async def test_the_async_client_retries_a_503_after_its_retry_after(
    service: Service, front: Proxy
) -> None:
    async with AsyncClient(front.url) as numerator:
        await numerator.create("wait")
        front.plan = ["503"]
        began = time.monotonic()
        got = await numerator.next("wait")
        took = time.monotonic() - began
        tries = front.next_requests()
        assert [t.done for t in tries] == ["503", "pass"]
        assert tries[1].at - tries[0].at >= 1.0, "Retry-After: 1 was honoured"
        assert got.value == 1 and took >= 1.0
        values = await asyncio.gather(*(numerator.next("wait") for _ in range(20)))
    assert sorted(v.value for v in values) == list(range(2, 22))


def test_retries_end_at_the_deadline(service: Service, front: Proxy) -> None:
    with Client(front.url, deadline=1.5) as numerator:
        numerator.create("late")
        front.plan = ["drop"] * 100
        began = time.monotonic()
        with pytest.raises(Unreachable, match="cannot reach numerator"):
            numerator.next("late")
        took = time.monotonic() - began
        tries = len(front.next_requests())
        front.plan = []
        after = numerator.next("late")
    assert took < 1.5 + 1.0 and tries >= 3, (took, tries)
    assert after.value == 2, "every dropped try found the first try's value: one value taken"


def test_problems_are_typed_exceptions(service: Service) -> None:
    with Client(service.url) as numerator:
        with pytest.raises(NotFound) as missing:
            numerator.next("no-such-counter")
        assert missing.value.status == 404
        assert missing.value.type == "urn:numerator:problem:counter-not-found"
        assert "no-such-counter" in missing.value.detail
        with pytest.raises(BadRequest) as bad:
            numerator.next("drop", count=0)
        assert bad.value.status == 422 and bad.value.title
        with pytest.raises(ValueError, match="values, or first"):
            numerator.void("drop", reason="x")


def test_keys_401_and_403_are_typed_too(service: Service) -> None:
    """Last in this module: the first key ends loopback's free pass for the service."""
    admin = httpx.post(
        service.url + "/keys", json={"name": "admin", "scopes": ["admin"]}, timeout=30
    ).json()["secret"]
    with Client(service.url, admin) as numerator:
        numerator.create("kept")
        scoped = httpx.post(
            service.url + "/keys",
            json={"name": "other", "scopes": ["next:other-*"]},
            headers={"Authorization": f"Bearer {admin}"},
            timeout=30,
        ).json()["secret"]
    with Client(service.url, key="") as anonymous, pytest.raises(Unauthorized) as no_key:
        anonymous.next("kept")
    assert no_key.value.status == 401
    with Client(service.url, scoped) as other, pytest.raises(Forbidden) as wrong_scope:
        other.next("kept")
    assert wrong_scope.value.status == 403 and wrong_scope.value.type.endswith("forbidden")
