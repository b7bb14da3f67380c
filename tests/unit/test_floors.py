"""The floor plan (docs/architecture.md, "Floors"): no import points back down the house, every
package has a floor, and no modules import each other in a circle. Read from the source with ast,
so a new arrow fails here before it tangles the floors; `floor_plan` takes the root it reads, so
the tests below plant each kind of fault in a tree of their own and watch it reported."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

INFRA = {"infra", "infra.run", "infra.observe", "infra.adapters"}
EDGE_AND_WORKER = INFRA | {"functions", "batcher"}

# Each floor and the floors it may import; a module may always import its own floor.
FLOORS: dict[str, set[str]] = {
    "infra": set(),  # the domain and the ports: the ground
    "infra.run": {"infra"},
    "infra.observe": {"infra", "infra.run"},
    "infra.adapters": {"infra", "infra.run", "infra.observe"},
    "functions": INFRA,
    "batcher": INFRA,
    "monitoring": set(),  # rules and dashboards name metrics as text (checked by their tests)
    "numerator.client": set(),  # the Python client needs httpx alone: any floor may hold it
    "bench": EDGE_AND_WORKER | {"numerator.client"},  # it measures the client too
    "numerator": EDGE_AND_WORKER | {"numerator.client", "bench", "monitoring"},
}
WINGS = {"infra": ("run", "observe", "adapters"), "numerator": ("client",)}
NOT_FLOORS = {"tests"}


def layer(module: str, tops: frozenset[str] = frozenset(FLOORS)) -> str | None:
    """The floor of a dotted module name, or None outside the project."""
    parts = module.split(".")
    if parts[0] not in {name.split(".")[0] for name in tops}:
        return None
    if len(parts) > 1 and parts[1] in WINGS.get(parts[0], ()):
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def imports(path: Path) -> set[str]:
    """The dotted names a file imports (any depth: lazy imports count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from a import b`: module a.b if there is one, else a (`graph` tells which)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def packages(root: Path) -> list[str]:
    """The top folders under `root` that are Python packages (but the tests)."""
    return sorted(
        p.parent.name for p in root.glob("*/__init__.py") if p.parent.name not in NOT_FLOORS
    )


def modules(root: Path) -> dict[str, Path]:
    """Every module of the project's packages by dotted name (a package by its own name)."""
    found = {}
    for top in packages(root):
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def graph(root: Path) -> dict[str, set[str]]:
    """Which project modules each module imports."""
    known = modules(root)
    out: dict[str, set[str]] = {}
    for name, path in known.items():
        out[name] = set()
        for imported in imports(path):
            parts = imported.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts and ".".join(parts) != name:
                out[name].add(".".join(parts))
    return out


def circles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other in a circle (Tarjan's strongly connected
    components of more than one module), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for after in sorted(edges.get(node, ())):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(out)


def floor_plan(root: Path, floors: Mapping[str, set[str]] = FLOORS) -> list[str]:
    """What breaks the floor plan under `root`: a package with no floor, an import of a floor
    its floor may not import, and each circle of modules importing each other."""
    tops = frozenset(floors)
    wrong = [
        f"{top}/ has no floor: add it to FLOORS and to docs/architecture.md"
        for top in packages(root)
        if top not in {name.split(".")[0] for name in tops}
    ]
    edges = graph(root)
    for module, imported in sorted(edges.items()):
        here = layer(module, tops)
        for name in sorted(imported):
            there = layer(name, tops)
            if here and there and there != here and there not in floors.get(here, set()):
                wrong.append(f"{module} ({here}) imports {name} ({there})")
    wrong += [f"import circle: {' ↔ '.join(group)}" for group in circles(edges)]
    return wrong


def test_the_house_keeps_its_floor_plan() -> None:
    wrong = floor_plan(ROOT)
    assert not wrong, "\n".join(wrong)


def test_every_package_is_read() -> None:
    """bench, numerator and monitoring too: the check once walked only three floors."""
    assert set(packages(ROOT)) >= {"infra", "functions", "batcher", "numerator", "bench"}
    assert {"monitoring"} <= set(packages(ROOT))
    read = {layer(name) for name in modules(ROOT)}
    assert read == set(FLOORS), read ^ set(FLOORS)


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("infra.wire", "infra"),
        ("infra.adapters.postgres", "infra.adapters"),
        ("infra.adapters", "infra.adapters"),
        ("functions.edge", "functions"),
        ("numerator.client", "numerator.client"),
        ("numerator.client.calls", "numerator.client"),
        ("numerator.commands", "numerator"),
        ("bench.client", "bench"),
        ("starlette.routing", None),
    ],
)
def test_layer_names_the_wing(module: str, expected: str | None) -> None:
    assert layer(module) == expected


def plant(root: Path, extra: dict[str, str]) -> Path:
    """A small house under `root`, sound but for the `extra` files planted in it."""
    files = {
        "infra/__init__.py": "",
        "infra/wire.py": "import json\n",
        "functions/__init__.py": "",
        "functions/edge.py": "from infra.wire import json\n",
        "numerator/__init__.py": "",
        "numerator/cli.py": "from functions import edge\n",
        "bench/__init__.py": "",
        **extra,
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_sound_planted_house_passes(tmp_path: Path) -> None:
    assert floor_plan(plant(tmp_path, {})) == []


def test_a_planted_arrow_back_up_is_reported(tmp_path: Path) -> None:
    root = plant(tmp_path, {"infra/trail.py": "from functions import edge\n"})
    assert floor_plan(root) == ["infra.trail (infra) imports functions.edge (functions)"]


def test_a_planted_arrow_from_bench_is_reported(tmp_path: Path) -> None:
    """bench/ once imported anything unseen; a lazy import is an arrow too."""
    root = plant(tmp_path, {"bench/client.py": "def f():\n    from numerator import cli\n"})
    assert floor_plan(root) == ["bench.client (bench) imports numerator.cli (numerator)"]


CLIENT = {
    "numerator/client/__init__.py": "from numerator.client.clients import Client\n",
    "numerator/client/failures.py": "import httpx\n",
    "numerator/client/clients.py": "import httpx\nfrom numerator.client.failures import E\n",
}
"""The client wing, a package of its own modules: they import each other and httpx alone."""


def test_the_client_wing_may_import_itself(tmp_path: Path) -> None:
    root = plant(tmp_path, {**CLIENT, "bench/client.py": "from numerator.client import Client\n"})
    assert floor_plan(root) == []


@pytest.mark.parametrize(
    ("source", "imported"),
    [
        ("from infra.wire import json\n", "infra.wire (infra)"),
        ("def f():\n    from numerator import cli\n", "numerator.cli (numerator)"),
        ("import bench\n", "bench (bench)"),
    ],
)
def test_a_planted_arrow_out_of_the_client_wing_is_reported(
    tmp_path: Path, source: str, imported: str
) -> None:
    """Any module of the client's package, not only its root: the wing is the whole folder."""
    root = plant(tmp_path, {**CLIENT, "numerator/client/failures.py": source})
    assert floor_plan(root) == [f"numerator.client.failures (numerator.client) imports {imported}"]


def test_a_planted_circle_inside_a_floor_is_reported(tmp_path: Path) -> None:
    """A lazy import closes a circle too: the modules still cannot be read apart."""
    root = plant(
        tmp_path,
        {
            "functions/routes.py": "from functions import ledger\n",
            "functions/ledger.py": "from functions.openapi import SCHEMA\n",
            "functions/openapi.py": "def paths():\n    from functions.routes import x\n",
        },
    )
    assert floor_plan(root) == [
        "import circle: functions.ledger ↔ functions.openapi ↔ functions.routes"
    ]


def test_a_package_without_a_floor_is_reported(tmp_path: Path) -> None:
    root = plant(tmp_path, {"attic/__init__.py": ""})
    assert floor_plan(root) == ["attic/ has no floor: add it to FLOORS and to docs/architecture.md"]


def test_every_module_is_named_on_its_floor() -> None:
    """docs/architecture.md is the map: each module of the product is named, in backticks, in
    the row of the folder that holds it (the deepest folder with a row)."""
    text = (ROOT / "docs" / "architecture.md").read_text().split("## Floors and wings")[1]
    rows = {
        line.split("`")[1].rstrip("/"): line
        for line in text.split("\n## ")[0].splitlines()
        if line.startswith("| `")
    }
    missing = []
    for top in ("infra", "functions", "batcher", "numerator", "bench", "monitoring"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.stem == "__init__":
                continue
            module = path.relative_to(ROOT).with_suffix("")
            folders = [str(module.parent), *map(str, module.parents)]
            row = rows.get(f"{module}.py") or next((rows[f] for f in folders if f in rows), "")
            if f"`{path.stem}`" not in row and not row.startswith(f"| `{module}.py`"):
                missing.append(str(module))
    assert missing == [], f"not on the map (docs/architecture.md, Floors): {missing}"


def test_no_test_module_imports_another() -> None:
    """Helpers two test modules share live in tests/ helper modules (tests/checks.py,
    tests/asgi.py, tests/tamper.py, ...), not in one of the two: importing a test module runs
    its collection-time code and ties one suite's edits to another's."""
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for name in sorted(imports(path))
        if (name.startswith("tests.") and name.split(".")[-1].startswith("test_"))
        or ".test_" in name
    ]
    assert found == []
