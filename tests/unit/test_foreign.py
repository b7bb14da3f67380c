"""Guarantee 8 before the first key: a loopback client is served only when its request is not a
web page's acting for the local user (functions/auth.py: foreign). Headers as a browser, or an
attacker's page, would send them."""

from __future__ import annotations

import pytest

from functions.auth import foreign
from functions.headers import hostname, read


def scope(*headers: tuple[str, str], scheme: str = "http") -> dict[str, object]:
    return {
        "type": "http",
        "scheme": scheme,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
    }


@pytest.mark.parametrize(
    "headers",
    [
        (("Host", "127.0.0.1:8080"),),
        (("Host", "localhost:8080"),),
        (("Host", "LOCALHOST:8080"),),  # a host name's case does not matter
        (("Host", "[::1]:8080"),),
        (("Host", "localhost:8080"), ("Origin", "http://localhost:8080")),
        (("Host", "localhost:8080"), ("Referer", "http://localhost:8080/openapi.json")),
        (("Host", "localhost:8080"), ("Sec-Fetch-Site", "same-origin")),
        (("Host", "localhost:8080"), ("Sec-Fetch-Site", "none")),
        (),  # a program that sends no Host (HTTP/1.0)
    ],
)
def test_the_users_own_requests_pass(headers: tuple[tuple[str, str], ...]) -> None:
    assert foreign(scope(*headers)) is None


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ((("Host", "attacker.example:8080"),), "Host"),
        ((("Host", "localhost:80@attacker.example"),), "Host"),  # a user part: no browser's
        ((("Host", "localhost:8080"), ("Host", "attacker.example")), "2 Host headers"),
        ((("Host", "localhost:8080"), ("Sec-Fetch-Site", "CROSS-SITE")), "Sec-Fetch-Site"),
        ((("Host", "localhost:8080"), ("Sec-Fetch-Site", "Same-Site")), "Sec-Fetch-Site"),
        ((("Host", "localhost:8080"), ("Referer", "http://attacker.example/")), "Referer"),
        ((("Host", "localhost:8080"), ("Referer", "http://localhost:8080.evil/")), "Referer"),
        ((("Host", "localhost:8080"), ("Origin", "https://localhost:8080")), "Origin"),
        ((("Host", "localhost:8080"), ("Origin", "null")), "Origin"),
    ],
)
def test_a_pages_requests_are_refused_naming_why(
    headers: tuple[tuple[str, str], ...], named: str
) -> None:
    reason = foreign(scope(*headers))
    assert reason is not None and named in reason
    # the edge skips the check for a request whose headers are plain: never for one of these
    assert not read(scope(*headers)).plain


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("localhost:80@attacker.example", ""),
        ("localhost:8o", ""),
        ("::1", ""),
        ("[::1", ""),
        ("LocalHost", "localhost"),
        ("[::1]:9", "::1"),
        ("127.0.0.1", "127.0.0.1"),
    ],
)
def test_hostname_reads_a_host_header_as_a_browser_writes_it(host: str, name: str) -> None:
    assert hostname(host) == name
