"""One meaning per name: no class name is defined twice in the product's packages (issue 53). Read
from the source with ast, classes nested anywhere included; `twice` takes the root it reads, so
the test below plants a second `Front` in a tree of its own and watches it reported."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("functions", "infra", "batcher", "numerator", "bench", "monitoring", "edge")
"""The product's packages; edge/ holds links to functions/ and infra/ (the Lambda edge's build),
read once by their real paths."""


def twice(root: Path, packages: tuple[str, ...] = PRODUCT) -> dict[str, list[str]]:
    """Each class name defined more than once under `packages` of `root`, and where."""
    where: dict[str, list[str]] = defaultdict(list)
    seen: set[Path] = set()
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            for node in ast.walk(ast.parse(real.read_text())):
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(f"{real.relative_to(root.resolve())}:{node.lineno}")
    return {name: places for name, places in sorted(where.items()) if len(places) > 1}


def test_no_class_name_is_defined_twice_in_the_product() -> None:
    assert twice(ROOT) == {}


def test_a_class_name_defined_twice_is_named(tmp_path: Path) -> None:
    for package, source in (("functions", "class Front:\n    pass\n"), ("batcher", "")):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "front.py").write_text(source or "def f():\n    class Front: ...\n")
    (tmp_path / "edge").mkdir()
    (tmp_path / "edge" / "functions").symlink_to(tmp_path / "functions")  # read once
    found = twice(tmp_path, ("functions", "batcher", "edge"))
    assert found == {"Front": ["functions/front.py:1", "batcher/front.py:2"]}
