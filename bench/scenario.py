"""Scenarios: YAML files under bench/scenarios/, with every field also a flag (flags win)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from bench.load import Load, Mix
from bench.schedule import Schedule, ScheduleError

MIXES = ("hot", "uniform", "zipf")


class ScenarioError(ValueError):
    pass


@dataclass(frozen=True)
class Scenario:
    description: str = ""
    schedule: str = "const(200, 10s)"
    mix: str = "hot"
    counters: int = 1
    zipf_s: float = 1.1
    count: int = 1
    idempotency_share: float = 0.0
    connections: int = 256
    timeout_s: float = 10.0
    workers: int = 1
    back_frame_ms: float = 10.0
    edge: str = "embedded"
    containers: int = 8  # --edge lambda: simulated Lambda containers a worker (LAMBDA_CONTAINERS)

    @classmethod
    def load(cls, path: Path) -> Scenario:
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ScenarioError(f"cannot read scenario {path}: {exc}") from None
        if not isinstance(data, dict):
            raise ScenarioError(f"{path}: a scenario is a mapping of fields")
        return cls().override(data)

    def override(self, values: dict[str, Any]) -> Scenario:
        known = {f.name: f.type for f in fields(self)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ScenarioError(f"unknown scenario field {unknown[0]!r}; known: {sorted(known)}")
        cast: dict[str, Any] = {}
        for name, value in values.items():
            if value is None:
                continue
            kind = {"str": str, "int": int, "float": float}[str(known[name])]
            try:
                cast[name] = kind(value)
            except (TypeError, ValueError):
                raise ScenarioError(f"{name} must be {kind.__name__}, not {value!r}") from None
        scenario = replace(self, **cast)
        scenario.check()
        return scenario

    def check(self) -> None:
        try:
            Schedule.parse(self.schedule)
        except ScheduleError as exc:
            raise ScenarioError(f"schedule: {exc}") from None
        if self.mix not in MIXES:
            raise ScenarioError(f"mix must be one of {', '.join(MIXES)}")
        if self.counters < 1 or (self.mix == "hot" and self.counters != 1):
            raise ScenarioError("counters must be ≥ 1 (and 1 for the hot mix)")
        if not 1 <= self.count <= 1000:
            raise ScenarioError("count must be from 1 to 1000")
        if not 0 <= self.idempotency_share <= 1:
            raise ScenarioError("idempotency_share must be from 0 to 1")
        if self.connections < 1 or self.workers < 1 or self.timeout_s <= 0:
            raise ScenarioError("connections, workers and timeout_s must be positive")
        if self.containers < 1:
            raise ScenarioError("containers must be at least 1")

    def load_plan(self) -> Load:
        return Load(
            schedule=Schedule.parse(self.schedule),
            mix=Mix(self.mix, self.counters, self.zipf_s),
            count=self.count,
            idempotency_share=self.idempotency_share,
            connections=self.connections,
            timeout=self.timeout_s,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
