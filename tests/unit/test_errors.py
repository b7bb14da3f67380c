"""The exception tree of infra/errors.py: drawn once in its docstring, and each of its errors
made somewhere in the product (an error nobody raises is one a caller handles in vain)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from infra import errors

ROOT = Path(__file__).parents[2]
PRODUCT = ("infra", "functions", "batcher", "numerator", "bench", "monitoring")
TREE = {
    name: cls
    for name, cls in vars(errors).items()
    if inspect.isclass(cls) and issubclass(cls, errors.NumeratorError)
}


def made(root: Path) -> set[str]:
    """The names the product calls or raises: an error is made (`X(...)`, `mod.X(...)`, in a
    `raise` or in a helper that returns it) or raised as a class (`raise X`)."""
    found = set()
    for top in PRODUCT:
        for path in (root / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call):
                    target = node.func
                elif isinstance(node, ast.Raise) and node.exc is not None:
                    target = node.exc
                else:
                    continue
                if isinstance(target, ast.Name):
                    found.add(target.id)
                elif isinstance(target, ast.Attribute):
                    found.add(target.attr)
    return found


def test_the_docstring_draws_the_whole_tree() -> None:
    drawn = set(re.findall(r"^(?:[│ ]*[├└]── )?([A-Z]\w+)", errors.__doc__ or "", re.MULTILINE))
    assert drawn - {"One"} == set(TREE)


def test_every_error_is_raised_somewhere_or_is_a_branch_of_the_tree() -> None:
    branches = {base.__name__ for cls in TREE.values() for base in cls.__mro__[1:]}
    never = sorted(set(TREE) - made(ROOT) - branches)
    assert never == [], f"defined in infra/errors.py but never raised: {never}"
