"""The counter model: names, templates, periods, parsing."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infra.counters import ConfirmMode, Counter, Reset, Template, check_name
from infra.errors import InvalidCounter

days = st.dates(min_value=date(1900, 1, 1), max_value=date(2999, 12, 31))
values = st.integers(min_value=0, max_value=2**62)


@given(values, days, st.integers(min_value=1, max_value=20))
def test_zero_padded_value_renders_like_format(value: int, day: date, width: int) -> None:
    rendered = Template(f"N-{{value:0{width}d}}").render(value, day)
    assert rendered == "N-" + str(value).zfill(width)
    assert int(rendered[2:]) == value


@given(values, days)
def test_date_fields_render_the_day(value: int, day: date) -> None:
    rendered = Template("{yyyy}|{yy}|{mm}|{dd}|{value}").render(value, day)
    assert rendered == f"{day.year:04d}|{day.year % 100:02d}|{day.month:02d}|{day.day:02d}|{value}"


@given(st.text(alphabet=st.characters(blacklist_characters="{}\x00"), max_size=40), values, days)
def test_literal_text_survives_rendering(text: str, value: int, day: date) -> None:
    assert Template(text + "{value}").render(value, day) == text + str(value)


def test_a_nul_is_refused_postgres_could_not_store_it() -> None:
    with pytest.raises(InvalidCounter, match="NUL"):
        Template("INV\x00{value}")


@given(st.text(max_size=60))
def test_any_template_is_either_rejected_cleanly_or_renders(text: str) -> None:
    try:
        template = Template(text)
    except InvalidCounter as exc:
        assert exc.field == "template"
    else:
        assert isinstance(template.render(7, date(2026, 1, 2)), str)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{value",
        "value}",
        "{}",
        "{0}",
        "{value!s}",
        "{value:{yyyy}}",
        "{yyyy}",
        "{value:x<99999999999999}",
        "{value.imag}",
        "{value[0]}",
        "x" * 201,
    ],
)
def test_bad_templates_are_rejected(text: str) -> None:
    with pytest.raises(InvalidCounter):
        Template(text)


def test_periods() -> None:
    day = date(2026, 11, 29)
    assert Reset.NEVER.period(day) == ""
    assert Reset.YEARLY.period(day) == "2026"
    assert Reset.MONTHLY.period(day) == "2026-11"
    assert Reset.DAILY.period(day) == "2026-11-29"


def test_period_uses_the_counters_time_zone() -> None:
    instant = datetime(2026, 12, 31, 23, 30, tzinfo=UTC)
    assert Counter("a", reset=Reset.YEARLY).period(instant) == "2026"
    assert Counter("a", reset=Reset.YEARLY, timezone="Europe/Berlin").period(instant) == "2027"
    assert Counter("a", reset=Reset.DAILY, timezone="America/New_York").period(instant) == (
        "2026-12-31"
    )


@pytest.mark.parametrize("name", ["a", "A9", "inv.2026_x-y", "9" * 128])
def test_good_names(name: str) -> None:
    check_name(name)


@pytest.mark.parametrize("name", ["", "-a", ".a", "_a", "a b", "a/b", "é", "a" * 129, None, 3])
def test_bad_names(name: object) -> None:
    with pytest.raises(InvalidCounter):
        check_name(name)


def test_parse_applies_defaults() -> None:
    assert Counter.parse({"name": "x"}) == Counter("x", 1, "{value}", Reset.NEVER, "UTC")


@pytest.mark.parametrize("mode", list(ConfirmMode))
def test_a_confirm_mode_reads_and_writes_back_as_given(mode: ConfirmMode) -> None:
    counter = Counter.parse({"name": "c", "confirm": str(mode)})
    assert counter.confirm is (mode is ConfirmMode.REQUIRED)
    assert counter.to_json()["confirm"] == mode
    assert Counter.parse({"name": "c"}).confirm is False, "none unless asked"


@pytest.mark.parametrize("given", ["Required", "yes", True, ["required"]])
def test_any_other_confirm_mode_is_refused_naming_the_modes(given: object) -> None:
    with pytest.raises(InvalidCounter, match="confirm: must be none or required"):
        Counter.parse({"name": "c", "confirm": given})
