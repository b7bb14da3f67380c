"""The atomic-counter baseline (bench/atomic.py) on a real DynamoDB API (moto server over HTTP,
or LocalStack), fed the API Gateway events in events/: it hands out numbers with one UpdateItem
ADD each — and takes a second number for a retried request, which numerator never does."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import atomic

EVENTS = Path(__file__).resolve().parents[2] / "events"


def load(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return event


@pytest.fixture
def table(aws_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"atomic-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("ATOMIC_ENDPOINT", aws_endpoint)
    monkeypatch.setenv("ATOMIC_TABLE", name)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setattr(atomic, "_client", None)
    atomic.make_table(name)
    yield name
    atomic.client().delete_table(TableName=name)
    atomic._client = None


def answer(result: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return result["statusCode"], json.loads(result["body"])


def test_it_hands_out_numbers_with_one_update_item_each(table: str) -> None:
    assert answer(atomic.handler(load("http-api-create.json")))[0] == 201
    assert answer(atomic.handler(load("http-api-create.json")))[0] == 409
    before = atomic.TALLY.made.get("update_item", 0)
    assert answer(atomic.handler(load("http-api-next.json"))) == (
        200,
        {"counter": "events-demo", "value": 1, "formatted": "1"},
    )
    status, body = answer(atomic.handler(load("http-api-next-count.json")))
    assert (status, body["first"], body["last"]) == (200, 2, 4)
    assert atomic.TALLY.made["update_item"] - before == 2
    missing = load("http-api-next.json") | {"rawPath": "/counters/nobody/next"}
    assert answer(atomic.handler(missing))[0] == 404
    bad = load("http-api-next-count.json") | {"queryStringParameters": {"count": "0"}}
    assert answer(atomic.handler(bad))[0] == 422


def test_a_retried_request_takes_a_second_number(table: str) -> None:
    """What the atomic counter cannot promise: a client that retries after a timeout (its
    first answer lost) gets a new number, and the first is a gap nobody can explain. numerator
    answers a retry with an Idempotency-Key from its reply, the same values."""
    atomic.handler(load("http-api-create.json"))
    retry = load("http-api-next.json")
    retry["headers"] = {**retry.get("headers", {}), "idempotency-key": "order-17"}
    first = answer(atomic.handler(retry))[1]["value"]
    second = answer(atomic.handler(retry))[1]["value"]
    assert (first, second) == (1, 2)
