"""Facts the README states that the code can check: the settings table and the metric list."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from infra.observe.metrics import Metrics
from infra.settings import Settings

README = (Path(__file__).parents[2] / "README.md").read_text()


def test_every_setting_is_in_the_readme_table_with_its_default() -> None:
    table = {
        row[0]: row[1]
        for row in re.findall(r"^\| `([A-Z_]+)` \| ([^|]+) \|", README, flags=re.MULTILINE)
    }
    for field in fields(Settings):
        variable = field.name.upper()
        assert variable in table, f"{variable} is missing from README's settings table"
        default = getattr(Settings(), field.name)
        if default != "":
            said = f"{default:g}" if isinstance(default, float) else str(default)
            assert table[variable].strip() == said, f"{variable}: README says {table[variable]}"
    assert set(table) == {f.name.upper() for f in fields(Settings)}


def test_every_metric_is_named_in_the_readme() -> None:
    for item in vars(Metrics()).values():
        assert f"`{item.name}" in README, f"{item.name} is missing from README's metrics"
