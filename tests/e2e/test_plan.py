"""The plan's model held against measurement: `numerator bench --aws moto` at two rates per edge
that measured.json was not fitted at, and the AWS calls per request `numerator plan`'s model
predicts for each run's rate and deployment within 25 % of the calls the run made."""

from __future__ import annotations

import pytest

from numerator.plan import EdgeKind, read_measured
from numerator.plan.measure import RATES, bench
from numerator.plan.model import Measured, measured_units

pytestmark = pytest.mark.slow

OTHER_RATES = {EdgeKind.SERVER: (500.0, 800.0), EdgeKind.LAMBDA: (9.0, 12.0)}


@pytest.mark.parametrize(
    "edge", [EdgeKind.SERVER, EdgeKind.LAMBDA]
)  # the atomic counter: 1 per request
def test_the_predicted_calls_per_request_are_within_a_quarter_of_the_measured(
    edge: EdgeKind,
) -> None:
    model = Measured.of(edge, read_measured()["edges"][str(edge)])
    for rate in OTHER_RATES[edge]:
        assert rate not in RATES[edge]
        run = bench(edge, rate)
        units = measured_units(run)
        predicted = sum(model.calls(run["rps"], units).values()) / run["rps"]
        measured = sum(run["calls"].values()) / run["duration_s"] / run["rps"]
        print(f"{edge} at {run['rps']:.0f} rps: predicted {predicted:.3f}, measured {measured:.3f}")
        assert abs(predicted - measured) <= 0.25 * measured, (edge, rate, predicted, measured)
