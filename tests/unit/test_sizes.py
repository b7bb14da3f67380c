"""The house's size bar (issue 53): no product module over 600 lines, no class over 20 methods.
Read from the source with ast, classes nested anywhere included; `oversized` takes the root it
reads, so the test below plants a long module and a wide class in a tree of their own and
watches both reported, and the bar itself passed."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("functions", "infra", "batcher", "numerator", "bench", "monitoring")
"""The product's packages (edge/ only links to functions/ and infra/)."""
MAX_LINES = 600
MAX_METHODS = 20


def methods(node: ast.ClassDef) -> int:
    """The functions a class defines in its own body: methods, properties, static and class
    methods alike (not those of the classes nested in it)."""
    return sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body)


def oversized(root: Path, packages: tuple[str, ...] = PRODUCT) -> list[str]:
    """Each module of `packages` under `root` over MAX_LINES lines, and each class in them with
    more than MAX_METHODS methods."""
    found: list[str] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text()
            where = path.relative_to(root)
            if (lines := len(text.splitlines())) > MAX_LINES:
                found.append(f"{where}: {lines} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ClassDef) and methods(node) > MAX_METHODS:
                    found.append(f"{where}:{node.lineno} {node.name}: {methods(node)} methods")
    return found


def test_no_module_or_class_is_over_the_bar() -> None:
    assert oversized(ROOT) == []


def test_a_long_module_and_a_wide_class_are_named(tmp_path: Path) -> None:
    def wide(name: str, count: int) -> str:
        body = "".join(f"    def m{i}(self) -> None: ...\n" for i in range(count))
        return f"class {name}:\n{body}"

    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "infra" / "full.py").write_text("x = 1\n" * MAX_LINES)  # at the bar: passes
    (tmp_path / "batcher").mkdir()
    inner = wide("Inner", 21).splitlines()
    nested = "def f() -> None:\n" + "".join(f"    {line}\n" for line in inner)
    (tmp_path / "batcher" / "wide.py").write_text(wide("Wide", 21) + wide("Even", 20) + nested)
    assert oversized(tmp_path, ("infra", "batcher")) == [
        "infra/long.py: 601 lines",
        "batcher/wide.py:1 Wide: 21 methods",
        "batcher/wide.py:45 Inner: 21 methods",
    ]
