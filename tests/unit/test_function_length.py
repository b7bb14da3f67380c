"""No function in the product runs over LONGEST lines: a longer one is usually a pure step hiding
inside an I/O step (STYLE.md), and the next engineer gets lost in it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
PRODUCT = ("infra", "functions", "batcher", "numerator", "bench", "monitoring")
LONGEST = 60


def long_functions(root: Path, paths: list[Path]) -> list[str]:
    """`path:line name (N lines)` of each function or method over LONGEST lines, its
    decorators left out, its docstring counted."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONGEST:
                    where = path.relative_to(root)
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def product(root: Path) -> list[Path]:
    return sorted(p for top in PRODUCT for p in (root / top).rglob("*.py"))


def test_no_function_in_the_product_is_over_60_lines() -> None:
    found = long_functions(ROOT, product(ROOT))
    assert not found, f"over {LONGEST} lines, split them:\n" + "\n".join(found)


def test_a_long_function_is_found(tmp_path: Path) -> None:
    """The rule can fail: a planted 61-line function is reported, a 60-line one is not."""
    body = "\n".join(f"    x{i} = {i}" for i in range(LONGEST - 1))
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "planted.py").write_text(
        f"def fits():\n{body}\n\n\nasync def long():\n{body}\n    x = 0\n"
    )
    assert long_functions(tmp_path, product(tmp_path)) == [
        f"infra/planted.py:{LONGEST + 3} long ({LONGEST + 1} lines)"
    ]
