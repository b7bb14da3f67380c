"""The plan's model held against measurement: `numerator bench --aws moto` at rates
measured.json was not fitted at, and the AWS calls per request `numerator plan`'s model
predicts for each run's rate and deployment within 25 % of the calls the run made.

The server edge's puts among them, since its front frames close on the batchers' reads
(FRONT_FRAME_POLICY=beats): one a read, whatever the put's latency. They were left out while
the frames closed when the last put returned, their number following moto's latency (0.081 calls
a request measured in a CI run where the model said 0.128); they are still printed apart."""

from __future__ import annotations

from typing import Any

import pytest

from numerator.plan import EdgeKind, read_measured
from numerator.plan.measure import RATES, bench
from numerator.plan.model import Measured, measured_units

pytestmark = pytest.mark.slow

# One rate an edge not measured.json's (the server edge at 800 held as well in the CI runs to
# 2026-12-04: docs/plan.md); the Lambda edge's runs are the slow ones (8 containers).
OTHER_RATES = {EdgeKind.SERVER: (500.0,), EdgeKind.LAMBDA: (12.0,)}
PUTS = {"put_record", "put_records"}
HELD = 0.9
"""A run that answered less of its offered rate did not hold it. A deployment the plan sizes
holds its rate; one that falls behind (a CI run on a machine losing half its CPU to steal
answered 661 of 800 rps) reads its shards on fewer beats than the model's five a second, and
puts fewer frames."""
TRIES = 3


def held(edge: EdgeKind, rate: float) -> dict[str, Any]:
    """A bench run at `rate` that held it (HELD), measured again up to TRIES times when this
    machine could not; a failure saying so if it never did."""
    answered = 0.0
    for _ in range(TRIES):
        run = bench(edge, rate)
        if run["rps"] >= HELD * rate:
            return run
        answered = run["rps"]
        print(f"{edge} at {rate:g} rps offered answered {answered:.0f}: measuring again")
    pytest.fail(
        f"this machine did not hold {rate:g} rps on the {edge} edge in {TRIES} runs "
        f"(the last answered {answered:.0f})"
    )


@pytest.mark.parametrize(
    "edge", [EdgeKind.SERVER, EdgeKind.LAMBDA]
)  # the atomic counter: 1 per request
def test_the_predicted_calls_per_request_are_within_a_quarter_of_the_measured(
    edge: EdgeKind,
) -> None:
    model = Measured.of(edge, read_measured()["edges"][str(edge)])
    for rate in OTHER_RATES[edge]:
        assert rate not in RATES[edge]
        run = held(edge, rate)
        units = measured_units(run)
        calls = {k: v / run["duration_s"] / run["rps"] for k, v in run["calls"].items()}
        model_calls = {k: v / run["rps"] for k, v in model.calls(run["rps"], units).items()}
        apart = PUTS if edge is EdgeKind.SERVER else set()
        predicted = sum(model_calls.values())
        measured = sum(calls.values())
        puts = (sum(model_calls.get(k, 0) for k in apart), sum(calls.get(k, 0) for k in apart))
        latency = {k: run["call_ms"].get(k) for k in apart}  # numerator_aws_call_seconds_total
        print(
            f"{edge} at {run['rps']:.0f} rps: predicted {predicted:.3f}, measured {measured:.3f}"
            + (
                f"; the puts: predicted {puts[0]:.3f}, measured {puts[1]:.3f} (ms a put: {latency})"
                if apart
                else ""
            )
        )
        assert abs(predicted - measured) <= 0.25 * measured, (edge, rate, predicted, measured)


def test_the_probe_times_a_lambdas_warm_invocations_alone() -> None:
    """`numerator plan --measure-cpu`'s probe, on fewer invocations: moto, a batcher and a
    Postgres started, one container of each Lambda alone, and each one's CPU a warm invocation
    printed as JSON: some milliseconds, the edge's (a put and a read, through the app) above the
    atomic counter's (one UpdateItem), both far below the waits (about 100 ms and 10 ms)."""
    import subprocess
    import sys

    import orjson

    done = subprocess.run(
        [sys.executable, "-m", "numerator.plan.probe", "10"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    cpu = orjson.loads(lines[-1])["invocation_cpu_ms"]
    assert 0.5 < cpu["atomic"] < cpu["lambda"] < 80, cpu
    print("\nCPU a warm invocation, ms:", cpu)
