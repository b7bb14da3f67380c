"""The command line's parser (numerator/commands.py, with the bench's): every argument says what
it is in --help, and building it loads none of the commands' own code."""

from __future__ import annotations

import argparse
import subprocess
import sys

from numerator.commands import build_parser


def arguments(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += arguments(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            found.append((path, action))
    return found


def test_every_argument_of_every_command_has_help_text() -> None:
    found = arguments(build_parser(), "numerator")
    assert len(found) > 80  # every command's, the bench's too
    silent = [f"{path} {a.option_strings or a.dest}" for path, a in found if not a.help]
    assert silent == []


def test_the_parser_loads_no_postgres_boto3_or_http_client() -> None:
    code = (
        "import sys; from numerator.commands import build_parser; build_parser(); "
        "print(sorted(m for m in ('psycopg', 'boto3', 'httpx', 'pgserver', 'granian') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
