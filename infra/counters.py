"""The counter model: name, start, template, reset period and time zone."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from functools import lru_cache
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from infra.errors import InvalidCounter

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_START = 2**62
MAX_RETENTION = 36_600  # days: a century
MAX_TEMPLATE = 200
MAX_WIDTH = 64
# What a template may be, as one pattern — the API schema publishes it and Template checks it:
# literal text (braces doubled) and fields. {value} takes an integer format spec (fill and
# align, sign, #, 0, width up to MAX_WIDTH, grouping, d/x/X/o/b); the date fields, which are
# text, take fill, align and width. At least one {value}.
_WIDTH = r"(?:[1-9]|[1-5][0-9]|6[0-4])"
_TEXT = r"(?:[^{}\x00]|\{\{|\}\})"  # no NUL: Postgres text cannot hold it
_VALUE = rf"\{{value(?::(?:[^{{}}\x00]?[<>^=])?[+ -]?#?0?{_WIDTH}?(?:,d?|_[dxXob]?|[dxXob])?)?\}}"
_DATE = rf"\{{(?:yyyy|yy|mm|dd)(?::(?:[^{{}}\x00]?[<>^])?{_WIDTH}?s?)?\}}"
TEMPLATE = re.compile(
    rf"^(?:{_TEXT}|{_VALUE}|{_DATE})*{_VALUE}(?:{_TEXT}|{_VALUE}|{_DATE})*$", re.DOTALL
)


class ConfirmMode(StrEnum):
    """Whether a counter's values must be confirmed (POST /counters/{name}/confirm) within
    CONFIRM_TTL_S, or are voided, not-confirmed: a counter's `confirm` setting."""

    NONE = "none"
    REQUIRED = "required"


class Reset(StrEnum):
    """When a counter starts again at `start`: the period its values belong to."""

    NEVER = "never"
    YEARLY = "yearly"
    MONTHLY = "monthly"
    DAILY = "daily"

    def period(self, day: date) -> str:
        """The key of the period `day` falls in: '', '2026', '2026-11' or '2026-11-29'."""
        if self is Reset.NEVER:
            return ""
        if self is Reset.YEARLY:
            return f"{day.year:04d}"
        if self is Reset.MONTHLY:
            return f"{day.year:04d}-{day.month:02d}"
        return day.isoformat()

    def refuses(self, period: str) -> str | None:
        """Why `period` is not one of this reset's periods (a form it does not take, or a date
        that does not exist, 2026-02-30), or None when it is."""
        shape = {Reset.NEVER: "", Reset.YEARLY: "0000", Reset.MONTHLY: "0000-00"}
        wanted = shape.get(self, "0000-00-00")
        if len(period) != len(wanted) or any(
            (c == "-") != (w == "-") or (w == "0" and not c.isdigit())
            for c, w in zip(period, wanted, strict=True)
        ):
            return f"a counter that resets {self.value} has periods {PERIOD_FORMS[self]}"
        try:
            if self is Reset.MONTHLY:
                date.fromisoformat(period + "-01")
            elif self is Reset.DAILY:
                date.fromisoformat(period)
        except ValueError:
            return f"{period} is no date: {PERIOD_FORMS[self]}"
        return None


PERIOD_FORMS = {
    Reset.NEVER: "'' only (it never resets)",
    Reset.YEARLY: "YYYY, e.g. 2026",
    Reset.MONTHLY: "YYYY-MM, e.g. 2026-11",
    Reset.DAILY: "YYYY-MM-DD, e.g. 2026-11-29",
}
"""The form of a period, by reset, for people."""

PERIOD_S = {
    Reset.NEVER: 0.0,
    Reset.DAILY: 2 * 86_400.0,
    Reset.MONTHLY: 32 * 86_400.0,
    Reset.YEARLY: 367 * 86_400.0,
}
"""How long a period lasts, at the most, with a day for time zones."""


class Template:
    """A format string over {value}, {yyyy}, {yy}, {mm} and {dd}, e.g. 'INV-{yyyy}-{value:06d}'."""

    FIELDS = frozenset({"value", "yyyy", "yy", "mm", "dd"})

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            raise InvalidCounter("template", "must be a non-empty string")
        if len(text) > MAX_TEMPLATE:
            raise InvalidCounter("template", f"longer than {MAX_TEMPLATE} characters")
        try:
            parts = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise InvalidCounter("template", str(exc)) from exc
        fields = [field for _, field, _, _ in parts if field is not None]
        unknown = sorted({f for f in fields if f not in self.FIELDS})
        if unknown:
            raise InvalidCounter(
                "template", f"unknown field {{{unknown[0]}}}; use {sorted(self.FIELDS)}"
            )
        if "value" not in fields:
            raise InvalidCounter("template", "must contain {value}")
        for _, _, spec, conversion in parts:
            if conversion is not None:
                raise InvalidCounter("template", "conversions such as !r are not allowed")
            if spec and "{" in spec:
                raise InvalidCounter("template", "nested fields are not allowed")
            if spec and any(int(n) > MAX_WIDTH for n in re.findall(r"\d+", spec)):
                raise InvalidCounter("template", f"widths above {MAX_WIDTH} are not allowed")
        if not TEMPLATE.fullmatch(text):
            raise InvalidCounter(
                "template",
                "format specs are limited: {value:[[fill]align][sign][#][0][width][,|_][d|x|X|o|b]}"
                f" and {{yyyy:[[fill]align][width]}} (likewise yy, mm, dd), widths 1 to "
                f"{MAX_WIDTH}; no NUL characters",
            )
        self.text = text
        try:
            self.render(1, date(2026, 1, 1))
        except (ValueError, TypeError) as exc:
            raise InvalidCounter("template", f"bad format spec: {exc}") from exc

    def render(self, value: int, day: date) -> str:
        if self.text == "{value}":
            return str(value)
        return self.text.format(value=value, **_date_fields(day))


@lru_cache(maxsize=64)
def _date_fields(day: date) -> dict[str, str]:
    return {
        "yyyy": f"{day.year:04d}",
        "yy": f"{day.year % 100:02d}",
        "mm": f"{day.month:02d}",
        "dd": f"{day.day:02d}",
    }


@lru_cache(maxsize=4096)
def template(text: str) -> Template:
    """A parsed template, cached: templates are immutable and few."""
    return Template(text)


def zone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name or len(name) > 64:
        raise InvalidCounter("timezone", "must be an IANA time zone name such as 'Europe/Berlin'")
    return _zone(name)


@lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidCounter("timezone", f"unknown time zone {name!r}") from exc


@dataclass(frozen=True, slots=True)
class Counter:
    name: str
    start: int = 1
    template: str = "{value}"
    reset: Reset = Reset.NEVER
    timezone: str = "UTC"
    retention_days: int | None = None
    """How long the audit trail of a period is kept after the period ends (None: the service's
    AUDIT_RETENTION_S); changeable later."""
    confirm: bool = False
    """Whether each value must be confirmed by its client within CONFIRM_TTL_S (else it is
    voided, not-confirmed)."""

    def today(self, now: datetime) -> date:
        """The calendar day of the instant `now` in the counter's time zone."""
        return now.astimezone(zone(self.timezone)).date()

    def period(self, now: datetime) -> str:
        return self.reset.period(self.today(now))

    def render(self, value: int, day: date) -> str:
        return template(self.template).render(value, day)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "start": self.start,
            "template": self.template,
            "reset": self.reset.value,
            "timezone": self.timezone,
            "retention_days": self.retention_days,
            "confirm": ConfirmMode.REQUIRED if self.confirm else ConfirmMode.NONE,
        }

    def retention_s(self, default: float) -> float:
        return self.retention_days * 86_400.0 if self.retention_days else default

    def keeping(self, default: float) -> Retention:
        """The retention class of this counter's audit rows, and how long after it is written
        a row of it is kept: the retention, plus the longest a period lasts (and a day of time
        zones), so that a period's rows are kept at least the retention after it ends. All the
        rows of one class expire in the order they were written."""
        return _keeping(self.retention_s(default), self.reset)

    @classmethod
    def parse(cls, body: object) -> Counter:
        """Validate a create request's body; raise InvalidCounter naming the bad field."""
        if not isinstance(body, dict):
            raise InvalidCounter("body", "must be a JSON object")
        fields = {"name", "start", "template", "reset", "timezone", "retention_days", "confirm"}
        unknown = sorted(set(body) - fields)
        if unknown:
            raise InvalidCounter(unknown[0], "unknown field")
        name = body.get("name")
        check_name(name)
        start = body.get("start", 1)
        if isinstance(start, float) and start.is_integer():  # 5.0 is an integer to JSON Schema
            start = int(start)
        if not isinstance(start, int) or isinstance(start, bool):
            raise InvalidCounter("start", "must be an integer")
        if not 0 <= start <= MAX_START:
            raise InvalidCounter("start", f"must be between 0 and {MAX_START}")
        text = body.get("template", "{value}")
        if not isinstance(text, str):
            raise InvalidCounter("template", "must be a non-empty string")
        template(text)
        reset = body.get("reset", "never")
        try:
            period = Reset(reset)
        except ValueError as exc:
            choices = ", ".join(r.value for r in Reset)
            raise InvalidCounter("reset", f"must be one of {choices}") from exc
        tz = body.get("timezone", "UTC")
        zone(tz)
        assert isinstance(name, str) and isinstance(text, str) and isinstance(tz, str)
        retention = check_retention(body.get("retention_days"))
        try:
            confirm = ConfirmMode(body.get("confirm", ConfirmMode.NONE))
        except ValueError as exc:
            raise InvalidCounter("confirm", f"must be {' or '.join(ConfirmMode)}") from exc
        return cls(
            name=name,
            start=start,
            template=text,
            reset=period,
            timezone=tz,
            retention_days=retention,
            confirm=confirm is ConfirmMode.REQUIRED,
        )


class Retention(NamedTuple):
    """How a counter's audit rows are kept (Counter.keeping): `klass`, their retention class
    (the rows of one class share a chain, "86400s-never"), and `keep_s`, how long after it is
    written a row of it is kept."""

    klass: str
    keep_s: float


@lru_cache(maxsize=256)  # asked per counter per frame
def _keeping(retention: float, reset: Reset) -> Retention:
    seconds = format(retention, "f").rstrip("0").rstrip(".")
    return Retention(f"{seconds}s-{reset.value}", retention + PERIOD_S[reset])


def check_retention(days: object) -> int | None:
    """A retention in whole days (None: the service's default)."""
    if days is None:
        return None
    if isinstance(days, float) and days.is_integer():
        days = int(days)
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= MAX_RETENTION:
        raise InvalidCounter(
            "retention_days", f"must be a whole number of days, 1 to {MAX_RETENTION}"
        )
    return days


def check_name(name: object) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidCounter(
            "name", "must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ (letters, digits, . _ -)"
        )
