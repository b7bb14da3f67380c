"""`numerator monitoring DIR`: write what ships for operating numerator where the user asks — the
Prometheus rules, the Grafana dashboard, and the two pages they point into — from the installed
package, so that a `pip install` without the source tree has them too."""

from __future__ import annotations

import argparse
import re
import sys
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from infra.errors import NumeratorError

FILES = ("rules.yml", "dashboard.json")  # package data of `monitoring`
PAGES = ("operations.md", "runbook.md")  # docs/: the rules' runbook_url is docs/runbook.md#…
SHARE = Path("share") / "numerator" / "docs"  # where a wheel puts PAGES (pyproject's data-files)


def docs() -> Path:
    """The folder holding PAGES: the source tree's docs/ (a checkout, an editable install), else
    the one the wheel installed under the environment's prefix."""
    here = Path(__file__).resolve().parents[1] / "docs"
    for folder in (here, Path(sys.prefix) / SHARE):
        if all((folder / page).is_file() for page in PAGES):
            return folder
    raise NumeratorError(f"numerator's docs ({', '.join(PAGES)}) are not installed")


def monitoring() -> Traversable:
    """The folder holding FILES: the installed `monitoring` package's, else the source tree's
    (an editable install made before `monitoring` was a package of the distribution)."""
    try:
        return resources.files("monitoring")
    except ModuleNotFoundError:
        here = Path(__file__).resolve().parents[1] / "monitoring"
        if all((here / name).is_file() for name in FILES):
            return here
    raise NumeratorError("numerator's monitoring files are not installed: pip install it again")


def write(folder: Path) -> list[Path]:
    """Write FILES into `folder` and PAGES into `folder`/docs; the paths written."""
    written = []
    (folder / "docs").mkdir(parents=True, exist_ok=True)
    shipped = monitoring()
    for name in FILES:
        target = folder / name
        target.write_bytes(shipped.joinpath(name).read_bytes())
        written.append(target)
    source = docs()
    for name in PAGES:
        target = folder / "docs" / name
        target.write_text(relinked((source / name).read_text()))
        written.append(target)
    return written


LINK = re.compile(r"\[([^\]]*)\]\(([^)#:\s]+)(#[^)\s]*)?\)")


def relinked(page: str) -> str:
    """A page's links as they resolve in `folder`: FILES sit beside docs/ there, not in a
    monitoring/ folder as in the source tree; a link to a page not written there becomes its
    text and where numerator's source keeps the page."""

    def link(found: re.Match[str]) -> str:
        text, target, anchor = found.group(1), found.group(2), found.group(3) or ""
        if target in PAGES:
            return found.group(0)
        if target.startswith("../monitoring/") and target.split("/")[-1] in FILES:
            return f"[{text}](../{target.split('/')[-1]}{anchor})"
        where = target.removeprefix("../") if target.startswith("../") else f"docs/{target}"
        return f"{text} (numerator's `{where}`)"

    return LINK.sub(link, page)


def run(args: argparse.Namespace) -> None:
    written = write(args.folder)
    for path in written:
        print(path)
    rules = args.folder / "rules.yml"
    print(
        f"Prometheus: rule_files: [{rules.resolve()}] and a scrape job on numerator's address "
        f"(see {args.folder / 'docs' / 'operations.md'}); Grafana: import "
        f"{args.folder / 'dashboard.json'}"
    )
