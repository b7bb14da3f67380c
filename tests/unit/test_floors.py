"""The floors and infra's wings: no import points back up (DESIGN.md, Layout). Read from the
source with ast, so a new arrow fails here before it tangles the layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Each layer and what it may import of the project; a module may always import its own layer.
ALLOWED = {
    "infra": set(),  # the domain and the ports: the ground
    "infra.run": {"infra"},
    "infra.observe": {"infra", "infra.run"},
    "infra.adapters": {"infra", "infra.run", "infra.observe"},
    "functions": {"infra", "infra.run", "infra.observe", "infra.adapters"},
    "batcher": {"infra", "infra.run", "infra.observe", "infra.adapters"},
}
PROJECT = ("infra", "functions", "batcher", "numerator", "bench", "monitoring")


def layer(module: str) -> str | None:
    """The layer of a dotted module name, or None outside the project."""
    parts = module.split(".")
    if parts[0] not in PROJECT:
        return None
    if parts[0] == "infra" and len(parts) > 1 and parts[1] in ("run", "observe", "adapters"):
        return f"infra.{parts[1]}"
    return parts[0]


def imports(path: Path) -> set[str]:
    """The project modules a file imports (any depth: lazy imports count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def arrows() -> list[tuple[str, str, str]]:
    """(file, its layer, the layer it imports) for every import across layers."""
    out = []
    for top in ALLOWED.keys() & set(PROJECT):
        for path in sorted((ROOT / top).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            here = layer(module)
            assert here is not None
            for name in imports(path):
                there = layer(name)
                if there is not None and there != here:
                    out.append((str(path.relative_to(ROOT)), here, there))
    return out


def test_no_import_points_back_up() -> None:
    wrong = [
        f"{path} ({here}) imports {there}"
        for path, here, there in arrows()
        if there not in ALLOWED.get(here, set())
        and not (there == "infra" and here.startswith("infra."))
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("infra.wire", "infra"),
        ("infra.adapters.postgres", "infra.adapters"),
        ("infra.adapters", "infra.adapters"),
        ("functions.edge", "functions"),
        ("starlette.routing", None),
    ],
)
def test_layer_names_the_wing(module: str, expected: str | None) -> None:
    assert layer(module) == expected


def test_the_check_sees_an_arrow_back_up(tmp_path: Path) -> None:
    """The rule is not vacuous: a domain module importing an adapter is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("from infra.adapters.postgres import PostgresStore\n")
    there = {layer(name) for name in imports(bad)}
    assert "infra.adapters" in there
    assert "infra.adapters" not in ALLOWED["infra"]
