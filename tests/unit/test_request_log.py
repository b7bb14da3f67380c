"""The edge's request log (functions/requestlog.py): no line for a request that works, one with
the request id for a server error or a slow answer."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from functions import requestlog
from functions.requestlog import logged


def answering(status: int) -> Any:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    return app


class Context:
    aws_request_id = "c0ffee00-1111-2222-3333-444455556666"


def scope(**more: Any) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/counters/inv/next", "headers": [], **more}


async def serve(status: int, **more: Any) -> list[bytes]:
    sent: list[bytes] = []

    async def send(message: Any) -> None:
        sent.append(message.get("body", b""))

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    await logged(answering(status), scope(**more), receive, send)
    return sent


async def test_a_request_that_works_or_a_clients_mistake_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    for status in (200, 201, 404, 422):
        assert await serve(status, **{"aws.context": Context()}) == [b"", b"{}"]
    assert caplog.records == []


async def test_a_server_error_logs_one_line_with_the_lambdas_request_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    await serve(503, **{"aws.context": Context()})
    assert len(caplog.records) == 1
    record = caplog.records[0]
    assert record.levelno == logging.ERROR and record.name == "numerator.edge"
    assert record.getMessage().startswith("POST /counters/inv/next answered 503 in ")
    assert record.getMessage().endswith(f"(request id {Context.aws_request_id})")


async def test_a_slow_answer_logs_a_warning_with_the_load_balancers_trace_id(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(requestlog, "SLOW_S", 0.0)
    trace = b"Root=1-67891233-abcdef012345678912345678"
    await serve(200, headers=[(b"x-amzn-trace-id", trace)])
    [record] = caplog.records
    assert record.levelno == logging.WARNING and trace.decode() in record.getMessage()


async def test_an_app_that_answers_nothing_is_logged_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def crashing(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("a bug")

    caplog.set_level(logging.DEBUG)
    with pytest.raises(RuntimeError):
        await logged(crashing, scope(), None, None)  # type: ignore[arg-type]
    [record] = caplog.records
    assert record.levelno == logging.ERROR and "answered nothing" in record.getMessage()
    assert len(record.getMessage().rsplit("request id ", 1)[1]) == 33  # 32 hex digits and ")"


def test_failures_are_logged_ten_a_second_and_the_rest_counted() -> None:
    """Through an outage every request fails: a line each stalled a worker whose log pipe
    filled (tests/e2e/test_failover.py) and would cost what the quiet lines saved."""
    from functions.requestlog import LineBudget

    budget = LineBudget(per_s=10)
    taken = [budget.take(100.0 + i / 100) for i in range(25)]  # 25 in a quarter second
    assert [may for may, _ in taken].count(True) == 10
    assert all(held == 0 for _, held in taken)
    assert budget.take(101.5) == (True, 15), "the next second's first line says the 15 held"
    assert budget.take(101.6) == (True, 0)
