"""`numerator bench`: filled in by the bench issue."""

from __future__ import annotations

import argparse
from typing import Any


def add_bench(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("bench", help="load tests")
    parser.set_defaults(run=lambda a: parser.print_help())
