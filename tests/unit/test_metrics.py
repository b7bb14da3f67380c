"""Metrics added up over processes or simulated Lambda containers."""

from __future__ import annotations

from infra.metrics import Metrics


def test_metrics_of_several_containers_add_up() -> None:
    one, two = Metrics(), Metrics()
    one.info.labels = {"role": "lambda"}
    one.next_requests.inc(3)
    two.next_requests.inc(4)
    one.aws_calls.inc("put_records", 2)
    two.aws_calls.inc("put_records", 1)
    two.aws_calls.inc("batch_get_item", 5)
    one.reply_wait.observe(0.01)
    two.reply_wait.observe(2.0)
    total = Metrics.total([one, two])
    assert total.next_requests.value == 7
    assert total.aws_calls.values == {"put_records": 3, "batch_get_item": 5}
    assert total.reply_wait.count == 2 and total.reply_wait.sum == 2.01
    assert total.info.labels == {"role": "lambda"}
    assert one.next_requests.value == 3, "the parts are left as they were"
