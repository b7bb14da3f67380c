"""Facts the docs state that the code can check: the settings tables, the metric list, the links
between pages, and a README short enough to be a front door."""

from __future__ import annotations

import re
from pathlib import Path

from infra.observe.metrics import Metrics
from infra.settings import GROUPS, VARIABLES, Settings

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
SETTINGS = (ROOT / "docs" / "settings.md").read_text()
METRICS = (ROOT / "docs" / "metrics.md").read_text()
ROW = re.compile(r"^\| `([A-Z_]+)` \| ([^|]+) \|", flags=re.MULTILINE)


def default_of(variable: str) -> object:
    group, name, _ = VARIABLES[variable]
    return getattr(getattr(Settings(), group), name) if group else Settings().mode


def test_every_setting_is_in_the_settings_page_with_its_default() -> None:
    table = {variable: default for variable, default in ROW.findall(SETTINGS)}
    for variable in VARIABLES:
        assert variable in table, f"{variable} is missing from docs/settings.md"
        default = default_of(variable)
        if default != "":
            said = f"{default:g}" if isinstance(default, float) else str(default)
            assert table[variable].strip() == said, f"{variable}: the page says {table[variable]}"
    assert set(table) == set(VARIABLES)


def test_each_settings_table_is_one_group() -> None:
    """The page's tables follow the groups of infra/settings.py, in order."""
    sections = re.split(r"^### ", SETTINGS, flags=re.MULTILINE)[1:]
    found = [{variable for variable, _ in ROW.findall(section)} for section in sections]
    expected = [{"MODE"}] + [
        {variable for variable, (group, _, _) in VARIABLES.items() if group == name}
        for name in GROUPS
    ]
    assert found == expected


def test_every_metric_is_named_on_the_metrics_page() -> None:
    for name, _ in Metrics().items():
        assert f"`{name}" in METRICS, f"{name} is missing from docs/metrics.md"


def test_every_metric_the_metrics_page_names_exists() -> None:
    named = set(re.findall(r"`((?:numerator|process)_[a-z_]+)", METRICS))
    assert named and named <= {name for name, _ in Metrics().items()}, named


def test_the_readme_is_a_front_door() -> None:
    lines = README.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines"
    assert lines[3].endswith("# run the service") and lines[4].endswith("# run the tests")


def test_every_relative_link_in_the_docs_leads_to_a_file() -> None:
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "\n".join(broken)


def test_the_operations_page_scrapes_the_batchers_default_port() -> None:
    from numerator.commands import BATCHER_PORT

    page = (ROOT / "docs" / "operations.md").read_text()
    ports = re.findall(r'job_name: numerator-batcher.*\n.*targets: \["127\.0\.0\.1:(\d+)"\]', page)
    assert ports == [str(BATCHER_PORT)], ports


def test_the_localstack_page_gives_the_host_mode_path_the_tests_take() -> None:
    """docs/localstack.md's first block is the host-mode path that works without compose: the
    command that installs LocalStack, and pytest on the tests that use it, with the settings
    the fixture starts it with named beside."""
    page = (ROOT / "docs" / "localstack.md").read_text()
    first = re.search(r"```sh\n(.*?)```", page, flags=re.DOTALL)
    assert first is not None and "docker compose" not in first.group(1)
    install, run = first.group(1).strip().splitlines()
    assert install == "python tests/localstack.py"
    paths = [word for word in run.split() if word.startswith("tests/")]
    assert paths and all((ROOT / path).exists() for path in paths)
    for path in paths:
        assert "localstack" in (ROOT / path).read_text()
    fixture = (ROOT / "tests" / "localstack.py").read_text()
    for setting in re.findall(r"`([A-Z_]+)=[^`]*`", page.split("## With Docker Compose")[0]):
        assert f'"{setting}"' in fixture or setting.startswith("AWS_"), setting
    assert page.index("cannot run") < page.index("docker compose -f")
