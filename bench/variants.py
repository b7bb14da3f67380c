"""`--settings`: one scenario against several configurations of numerator in one invocation,
side by side in one report (as `--compare` puts the baselines beside it).

    numerator bench --local --settings FRAME_POLICY=fixed --settings FRAME_POLICY=auto

Each `--settings` is one configuration, `KEY=VALUE[,KEY=VALUE…]` in the service's own
environment variables (docs/settings.md); each is checked as the service would check it before
anything starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.errors import SettingsError
from infra.settings import VARIABLES, Settings

# Set by the bench itself: where the database is, and the scenario's own fields.
NOT_HERE = {
    "DATABASE_URL": "the bench's Postgres",
    "WORKERS": "--workers",
    "MODE": "--edge (with --aws)",
}
SDK = frozenset({"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SERVICE_NAME"})
"""OpenTelemetry's own variables, read by its SDK in a service that traces (TRACE_FILE)."""
SETTINGS = frozenset(VARIABLES) | SDK  # every service setting


class VariantError(ValueError):
    pass


@dataclass(frozen=True)
class Variant:
    env: dict[str, str]
    label: str = ""
    """What the run is called instead of its settings, if given."""

    @property
    def name(self) -> str:
        if self.label:
            return f"numerator[{self.label}]"
        if not self.env:
            return "numerator"
        return "numerator[" + ",".join(f"{k}={v}" for k, v in self.env.items()) + "]"


def tracing_cost(folder: Path) -> list[Variant]:
    """`--trace-cost`: numerator with tracing off, then tracing 1 % and 100 % of its requests
    into a trace file each in `folder` (the report draws one request's hops from them)."""
    ratio = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}
    return [
        Variant({}, "tracing off"),
        Variant({"TRACE_FILE": str(folder / "trace-1pct.jsonl"), **ratio}, "tracing 1%"),
        Variant(
            {
                "TRACE_FILE": str(folder / "trace-100pct.jsonl"),
                "OTEL_TRACES_SAMPLER": "parentbased_always_on",
            },
            "tracing 100%",
        ),
    ]


def parse(texts: list[str] | None) -> list[Variant]:
    """The configurations named by `--settings` flags; one with the defaults when none is."""
    if not texts:
        return [Variant({})]
    variants = []
    for text in texts:
        env: dict[str, str] = {}
        for pair in filter(None, (p.strip() for p in text.split(","))):
            key, equals, value = pair.partition("=")
            key = key.strip().upper()
            if not equals or not key:
                raise VariantError(f"--settings {text!r}: expected KEY=VALUE[,KEY=VALUE…]")
            if key in NOT_HERE:
                raise VariantError(f"--settings: {key} is set by {NOT_HERE[key]}, not here")
            if key not in SETTINGS:
                raise VariantError(
                    f"--settings: unknown setting {key!r}; known: {', '.join(sorted(SETTINGS))}"
                )
            env[key] = value.strip()
        if not env:
            raise VariantError(f"--settings {text!r}: expected KEY=VALUE[,KEY=VALUE…]")
        try:
            Settings.from_env({k: v for k, v in env.items() if k not in SDK})
        except SettingsError as exc:
            raise VariantError(f"--settings {text!r}: {exc}") from None
        variants.append(Variant(env))
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise VariantError("--settings: the same configuration is given twice")
    return variants
