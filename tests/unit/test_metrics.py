"""Metrics added up over processes or simulated Lambda containers."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from infra.observe.metrics import Metrics


def test_metrics_of_several_containers_add_up() -> None:
    one, two = Metrics(), Metrics()
    one.info.labels = {"role": "lambda"}
    one.next_requests.inc(3)
    two.next_requests.inc(4)
    one.aws_calls.inc("put_records", 2)
    two.aws_calls.inc("put_records", 1)
    two.aws_calls.inc("batch_get_item", 5)
    one.reply_wait_seconds.observe(0.01)
    two.reply_wait_seconds.observe(2.0)
    total = Metrics.total([one, two])
    assert total.next_requests.value == 7
    assert total.aws_calls.values == {"put_records": 3, "batch_get_item": 5}
    assert total.reply_wait_seconds.count == 2 and total.reply_wait_seconds.sum == 2.01
    assert total.info.labels == {"role": "lambda"}
    assert one.next_requests.value == 3, "the parts are left as they were"


def test_gauges_add_up_or_take_the_largest() -> None:
    one, two = Metrics(), Metrics()
    one.leases_held.set(2)
    two.leases_held.set(3)
    one.batcher_lag_seconds.set(0.5)
    two.batcher_lag_seconds.set(0.2)
    one.batchers.set(2)
    two.batchers.set(2)
    total = Metrics.total([one, two])
    assert total.leases_held.value == 5  # each holds its own
    assert total.batcher_lag_seconds.value == 0.5  # the oldest record, not a sum of ages
    assert total.batchers.value == 2  # both see the same two


def full() -> Metrics:
    metrics = Metrics()
    metrics.info.labels = {"version": "x"}
    metrics.next_requests.inc(7)
    metrics.responses.inc("200", 6)
    metrics.responses.inc("503")
    metrics.frame_commit_seconds.observe(0.003)
    metrics.frame_commit_seconds.observe(4.0)
    metrics.leases_held.set(2)
    metrics.batcher_lag_seconds.set(0.25)
    return metrics


def test_state_makes_the_same_metrics_again() -> None:
    metrics = full()
    state = orjson.loads(orjson.dumps(metrics.state()))  # as a worker's file holds it
    assert Metrics.from_state(state).render() == metrics.render()


def test_a_gone_process_keeps_what_it_counted_not_what_it_held() -> None:
    gone = Metrics.from_state(full().state(), gauges=False)
    assert gone.next_requests.value == 7 and gone.responses.values == {"200": 6, "503": 1}
    assert gone.frame_commit_seconds.count == 2
    assert gone.leases_held.value == 0 and gone.batcher_lag_seconds.value == 0


def test_a_state_from_another_version_loads_what_this_one_knows() -> None:
    state = full().state()
    state["numerator_gone_total"] = 3
    state["numerator_frame_commit_seconds"] = {
        "counts": [1, 2],
        "sum": 1.0,
        "count": 3,
    }  # other buckets
    loaded = Metrics.from_state(state)
    assert loaded.next_requests.value == 7
    assert loaded.frame_commit_seconds.count == 0


def test_label_values_are_escaped_as_the_text_format_asks() -> None:
    metrics = Metrics()
    metrics.info.labels = {"authorizer": 'a "quoted"\\path\nnext'}
    metrics.aws_calls.inc('put"records\n')
    text = metrics.render()
    assert 'authorizer="a \\"quoted\\"\\\\path\\nnext"' in text
    assert 'numerator_aws_calls_total{call="put\\"records\\n"} 1' in text
    for line in text.splitlines():  # no value ends its line early
        assert line.startswith(("#", "numerator_", "process_")), line


async def test_a_long_running_process_writes_its_changes_as_emf_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The server edge on ECS (and the batcher) write EMF lines every EMF_INTERVAL_S and once
    more at the end, each with what changed since the one before: CloudWatch's sums are right."""
    import json

    from infra.observe.emf import writing

    metrics = Metrics()
    async with writing(metrics, "server", 0.05):
        metrics.next_requests.inc(3)
        await asyncio.sleep(0.12)
        metrics.next_requests.inc(2)
        metrics.responses.inc("504")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "_aws" in line]
    assert lines and all(line["role"] == "server" for line in lines)
    assert sum(line.get("Requests", [0])[0] for line in lines) == 5
    assert sum(line.get("ReplyTimeouts", [0])[0] for line in lines) == 1


def test_an_idle_batcher_writes_no_emf_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 51, item 11: nothing when nothing changed. The batcher's flush added its lag to
    every line, so an idle batcher wrote one an interval; its lag goes out when it changed, or
    beside what did."""
    import json

    from infra.observe.emf import Emf

    metrics = Metrics()
    emf = Emf(metrics, "batcher")
    metrics.batcher_lag_seconds.set(0.5)
    assert emf.flush() == {"LagSeconds": 0.5}
    assert emf.flush() == {}, "nothing changed"
    metrics.records_in.inc(4)
    assert emf.flush() == {"RecordsIn": 4, "LagSeconds": 0.5}, "the lag beside what changed"
    metrics.batcher_lag_seconds.set(0.0)
    assert emf.flush() == {"LagSeconds": 0.0}, "the lag fell: said once"
    assert emf.flush() == {}
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "_aws" in line]
    assert len(lines) == 3


async def test_each_aws_call_is_timed_by_call_failed_tries_too() -> None:
    """numerator_aws_call_seconds_total: what a call's mean latency is read from (the plan's
    measure keeps it as call_ms)."""
    import time as clock

    from botocore.exceptions import ClientError

    from infra.adapters.aws import AwsCaller

    metrics = Metrics()
    calls = AwsCaller(2, metrics, cap=0.01)
    tries = iter([True, False])

    def put_record(**_: object) -> dict[str, object]:
        clock.sleep(0.02)
        if next(tries):
            error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": ""}}
            raise ClientError(error, "PutRecord")  # type: ignore[arg-type]
        return {}

    await calls(put_record)
    calls.close()
    assert metrics.aws_calls.values == {"put_record": 2}
    assert 0.04 <= metrics.aws_call_seconds.values["put_record"] < 1.0


def test_a_lambda_containers_emf_lines_come_once_an_interval_with_the_sums_or_at_once_on_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Lambda container ticks its EMF at the end of every invocation; a line is written only
    when the interval has passed since the last (or a server error or a throttle was counted),
    and the lines' values add up to what was counted."""
    import json

    from infra.observe.emf import Emf

    metrics = Metrics()
    emf = Emf(metrics, "lambda", every=60.0)
    start = emf.flushed_at
    for second in range(1, 60):  # a request a second: no line within the interval
        metrics.next_requests.inc()
        assert emf.tick(start + second) == {}
    assert capsys.readouterr().out == ""
    metrics.next_requests.inc()
    assert emf.tick(start + 60) == {"Requests": 60.0}
    metrics.next_requests.inc(2)
    metrics.responses.inc("503")
    assert emf.tick(start + 61) == {"Requests": 2.0, "Unavailable": 1.0, "ServerErrors": 1.0}
    metrics.next_requests.inc(5)
    metrics.aws_throttles.inc("put_record")
    assert emf.tick(start + 62)["AwsThrottles"] == 1.0  # at once too
    metrics.next_requests.inc(7)
    assert emf.tick(start + 100) == {}  # 38 s after the last line
    assert emf.tick(start + 122) == {"Requests": 7.0}
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 4 and all(line["role"] == "lambda" for line in lines)
    assert sum(line.get("Requests", [0])[0] for line in lines) == metrics.next_requests.value
