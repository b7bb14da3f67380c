from pathlib import Path

import pytest

from bench.variants import VariantError, parse, tracing_cost


def test_no_settings_is_one_run_with_the_defaults() -> None:
    assert [v.name for v in parse(None)] == ["numerator"]


def test_each_settings_flag_is_one_configuration() -> None:
    variants = parse(["FRAME_POLICY=fixed", "frame_policy=auto, FRAME_MIN_MS=1"])
    assert [v.env for v in variants] == [
        {"FRAME_POLICY": "fixed"},
        {"FRAME_POLICY": "auto", "FRAME_MIN_MS": "1"},
    ]
    assert variants[1].name == "numerator[FRAME_POLICY=auto,FRAME_MIN_MS=1]"


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["NOPE=1"], "unknown setting 'NOPE'"),
        (["FRAME_POLICY=sometimes"], "FRAME_POLICY: must be one of fixed, auto"),
        (["BACK_FRAME_MS=-1"], "BACK_FRAME_MS: must be greater than 0"),
        (["FRAME_POLICY"], "expected KEY=VALUE"),
        ([","], "expected KEY=VALUE"),
        (["DATABASE_URL=postgresql://x"], "DATABASE_URL is set by the bench's Postgres"),
        (["WORKERS=2"], "WORKERS is set by --workers"),
        (["FRAME_POLICY=auto", "FRAME_POLICY=auto"], "given twice"),
    ],
)
def test_a_bad_configuration_is_refused_before_anything_starts(given: list[str], says: str) -> None:
    with pytest.raises(VariantError, match=says):
        parse(given)


def test_tracing_cost_is_off_then_one_percent_then_all(tmp_path: Path) -> None:
    off, some, every = tracing_cost(tmp_path)
    assert [v.name for v in (off, some, every)] == [
        "numerator[tracing off]",
        "numerator[tracing 1%]",
        "numerator[tracing 100%]",
    ]
    assert off.env == {}
    assert some.env["OTEL_TRACES_SAMPLER_ARG"] == "0.01"
    assert every.env["OTEL_TRACES_SAMPLER"] == "parentbased_always_on"
    assert some.env["TRACE_FILE"] != every.env["TRACE_FILE"]
    assert all(Path(v.env["TRACE_FILE"]).parent == tmp_path for v in (some, every))


def test_the_sdks_sampling_variables_are_settings_a_run_may_give() -> None:
    [traced] = parse(["TRACE_FILE=/tmp/t.jsonl,OTEL_TRACES_SAMPLER=always_on"])
    assert traced.env["OTEL_TRACES_SAMPLER"] == "always_on"
