"""The client's pure parts: when it tries again and how long it waits, how it reads answers and
problems. (Against a live service: tests/e2e/test_client.py.)"""

from __future__ import annotations

import email.utils
import socket
import ssl
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from numerator import client
from numerator.client import (
    LONGEST_WAIT_S,
    BadURL,
    Calls,
    Client,
    Conflict,
    NotFound,
    Retry,
    ServiceUnavailable,
    StatusError,
    TooMany,
    Unreachable,
    Values,
    clients,
    retries,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def answer(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers, json={"title": "t"})


def test_an_answer_is_final_but_for_the_statuses_a_retry_may_cure() -> None:
    for status in (200, 201, 400, 401, 403, 404, 409, 422, 500):
        assert Retry(60).wait(answer(status)) is None, status
    for status in (429, 502, 503, 504):
        assert Retry(60).wait(answer(status)) is not None, status
    assert Retry(60).wait(None) is not None, "no answer at all: try again"


def test_the_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    retry = Retry(10_000)
    waits = [retry.wait(None) for _ in range(12)]
    assert all(w is not None and 0 <= w <= LONGEST_WAIT_S for w in waits)
    caps = [min(LONGEST_WAIT_S, client.FIRST_WAIT_S * 2**n) for n in range(12)]
    assert all(w is not None and w <= cap for w, cap in zip(waits, caps, strict=True))
    assert max(w for w in waits[6:] if w is not None) > client.FIRST_WAIT_S * 2


def test_the_first_wait_is_drawn_up_to_first_wait_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each wait's ceiling, drawn at its top: FIRST_WAIT_S first, then doubling to the cap."""
    monkeypatch.setattr(retries.random, "uniform", lambda low, high: high)
    retry = Retry(10_000)
    waits = [retry.wait(None) for _ in range(8)]
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    assert waits[0] == client.FIRST_WAIT_S


def test_retry_after_as_an_http_date_is_waited_for() -> None:
    """RFC 9110 10.2.3: Retry-After is delay-seconds or an HTTP-date."""
    soon = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=3), usegmt=True)
    wait = Retry(60).wait(answer(503, **{"Retry-After": soon}))
    assert wait is not None and 1.5 < wait <= 3.0, (soon, wait)
    past = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert Retry(60).wait(answer(503, **{"Retry-After": past})) == 0.0
    later = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=90), usegmt=True)
    assert Retry(60).wait(answer(503, **{"Retry-After": later})) is None, "past the deadline"


def test_retry_after_is_honoured_and_the_deadline_ends_the_tries() -> None:
    clock = Clock()
    retry = Retry(5, clock)
    assert retry.wait(answer(503, **{"Retry-After": "2"})) == 2.0
    clock.now = 2.5
    assert retry.wait(answer(503, **{"Retry-After": "3"})) is None, "past the deadline: stop"
    clock.now = 4.99
    assert Retry(5, clock).wait(None) is not None
    late = Retry(5, clock)
    clock.now += 5
    assert late.wait(None) is None


def test_values_read_one_value_and_many() -> None:
    one = Values.from_json({"counter": "c", "value": 7, "formatted": "C-7"}, "k1")
    assert (one.value, one.formatted, one.first, one.last, one.idempotency_key) == (
        7,
        "C-7",
        7,
        7,
        "k1",
    )
    body = {
        "counter": "c",
        "first": 8,
        "last": 9,
        "values": [{"value": 8, "formatted": "C-8"}, {"value": 9, "formatted": "C-9"}],
    }
    many = Values.from_json(body, "k2")
    assert [v.value for v in many.values] == [8, 9] and many.formatted == "C-8"


def test_every_next_carries_an_idempotency_key_and_each_call_its_own() -> None:
    first, second = Calls.next("c", 1, None), Calls.next("c", 1, None)
    assert first.headers["Idempotency-Key"] != second.headers["Idempotency-Key"]
    assert Calls.next("c", 3, "mine").headers == {"Idempotency-Key": "mine"}
    assert Calls.next("c", 3, "mine").params == {"count": 3}


def served(handler: Any) -> Client:
    return Client("http://numerator.test", transport=httpx.MockTransport(handler), deadline=5)


def test_problems_become_exceptions_by_status_with_their_fields() -> None:
    body = {
        "type": "urn:numerator:problem:counter-exists",
        "title": "Counter exists",
        "status": 409,
        "detail": "a counter named c exists",
    }
    conflict = served(lambda request: httpx.Response(409, json=body))
    with conflict as numerator, pytest.raises(Conflict) as raised:
        numerator.create("c")
    assert raised.value.type == body["type"] and raised.value.detail == body["detail"]
    assert str(raised.value) == "409 Counter exists: a counter named c exists"
    missing = served(lambda request: httpx.Response(404, text="not json"))
    with missing as numerator, pytest.raises(NotFound) as raw:
        numerator.get("c")
    assert raw.value.type == "about:blank" and "not json" in raw.value.detail
    assert issubclass(TooMany, StatusError) and issubclass(ServiceUnavailable, StatusError)


def test_a_retried_next_sends_the_same_key_until_it_is_answered() -> None:
    keys: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers["Idempotency-Key"])
        if len(keys) < 3:
            return httpx.Response(504, json={"title": "Gateway Timeout"})
        return httpx.Response(200, json={"counter": "c", "value": 1, "formatted": "1"})

    with served(handler) as numerator:
        got = numerator.next("c")
    assert len(keys) == 3 and len(set(keys)) == 1 and got.idempotency_key == keys[0]


def test_the_key_and_url_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMERATOR_URL", "http://elsewhere:9000/")
    monkeypatch.setenv("NUMERATOR_KEY", "nmr_secret")
    with Client() as numerator:
        assert numerator.url == "http://elsewhere:9000"
        assert numerator.http.headers["Authorization"] == "Bearer nmr_secret"
    with Client("http://here:1", key="") as anonymous:
        assert "Authorization" not in anonymous.http.headers


def test_create_returns_a_counter_that_exists_with_the_same_settings_and_refuses_another() -> None:
    """A retried create whose first answer was lost finds its counter made: not an error."""
    made = {
        "name": "c",
        "template": "C-{value}",
        "start": 1,
        "reset": "never",
        "timezone": "UTC",
        "retention_days": None,
        "confirm": "none",
        "value": None,
        "period": "",
    }
    exists = {"type": "urn:numerator:problem:counter-exists", "title": "Conflict", "status": 409}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(409, json=exists)
        return httpx.Response(200, json=made)

    with served(handler) as numerator:
        assert numerator.create("c", template="C-{value}").template == "C-{value}"
        with pytest.raises(Conflict):
            numerator.create("c", template="OTHER-{value}")


@pytest.mark.parametrize(
    ("url", "proxy", "tls"),
    [
        ("https://numbers.example", None, True),
        ("http://127.0.0.1:8080", None, False),
        ("http://127.0.0.1:8080", "https://proxy.example:3128", True),
        ("http://127.0.0.1:8080", "http://proxy.example:3128", False),
    ],
)
def test_a_tls_context_is_built_only_when_tls_may_be_spoken(
    url: str, proxy: str | None, tls: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    if proxy:
        monkeypatch.setenv("ALL_PROXY", proxy)
    assert clients._tls(url) is tls
    with Client(url) as made:  # and an https URL's client verifies what it connects to
        context = made.http._transport._pool._ssl_context  # type: ignore[attr-defined]
        assert (context.verify_mode == ssl.CERT_REQUIRED) is tls


def closed_port() -> int:
    """A loopback port nothing listens on: connecting is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (f"http://127.0.0.1:{closed_port()}", "nothing listens there (connection refused)"),
        (f"http://localhost:{closed_port()}", "nothing listens there (connection refused)"),
        ("http://no-such-host.invalid:8080", "'no-such-host.invalid' does not resolve"),
    ],
)
def test_when_nothing_can_answer_a_call_gives_up_within_seconds_saying_what_to_check(
    url: str, said: str
) -> None:
    """The library's deadline is a minute, for a service that is slow or restarting; a refused
    connection on this machine, or a name that does not resolve, is answered within
    REFUSED_DEADLINE_S, naming the setting to check."""
    began = time.monotonic()
    with Client(url) as numerator, pytest.raises(Unreachable) as raised:
        numerator.next("inv")
    took = time.monotonic() - began
    assert took < client.REFUSED_DEADLINE_S + 1.0, took
    assert said in str(raised.value) and "NUMERATOR_URL" in str(raised.value)


async def test_the_async_client_gives_up_as_soon() -> None:
    from numerator.client import AsyncClient

    began = time.monotonic()
    async with AsyncClient(f"http://127.0.0.1:{closed_port()}") as numerator:
        with pytest.raises(Unreachable, match="connection refused"):
            await numerator.next("inv")
    assert time.monotonic() - began < client.REFUSED_DEADLINE_S + 1.0


def test_a_refused_connection_elsewhere_is_retried_to_the_deadline() -> None:
    """Another machine's service may be restarting behind its balancer: worth the retries."""
    refused = httpx.ConnectError("[Errno 111] Connection refused")
    assert retries.nothing_answers(refused, "http://numbers.example:8080") is None
    assert retries.nothing_answers(refused, "http://[::1]:8080") is not None
    assert retries.nothing_answers(httpx.ReadTimeout("slow"), "http://127.0.0.1:8080") is None


@pytest.mark.parametrize("url", ["localhost:18080", "127.0.0.1:8080", "ftp://host", "http://"])
def test_a_url_without_http_is_refused_at_once(url: str) -> None:
    with pytest.raises(BadURL, match="must start with http:// or https://"):
        Client(url)
    assert clients._checked_url("http://h:1/") == "http://h:1"


def test_a_problem_names_the_field_it_is_about() -> None:
    body = {"title": "The request is malformed", "field": "count", "detail": "must be 1 to 1000"}
    assert str(StatusError(422, body)) == "422 The request is malformed: count must be 1 to 1000"
    other = {**body, "field": "body", "detail": "not valid JSON"}
    assert str(StatusError(422, other)) == "422 The request is malformed: body: not valid JSON"
    assert (
        StatusError(422, body).field == "count" and StatusError(404, {"title": "t"}).field is None
    )


def test_the_package_root_exports_every_exception_the_client_raises() -> None:
    import numerator

    raised = {
        name
        for name, thing in vars(client).items()
        if isinstance(thing, type) and issubclass(thing, client.ClientError)
    }
    assert raised <= set(numerator.__all__) and raised <= set(client.__all__)
    assert all(getattr(numerator, name) is getattr(client, name) for name in raised)
    assert all(not name.startswith("_") for name in client.__all__)


def test_no_method_shadows_a_builtin_type() -> None:
    """A method named `list` made `list[CounterInfo]` in the class's annotations mean the method."""
    import builtins

    for cls in (Client, client.AsyncClient):
        shadowing = [name for name in vars(cls) if isinstance(getattr(builtins, name, None), type)]
        assert not shadowing, f"{cls.__name__}: {shadowing}"
