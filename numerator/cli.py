"""The `numerator` command line: parse (numerator.commands), run the command, and say its error
once, here, whichever floor raised it."""

from __future__ import annotations

import os
import sys

from infra.errors import NumeratorError
from numerator.commands import build_parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        raise SystemExit(2)
    try:
        args.run(args)
    except BrokenPipeError:  # `numerator … | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    except Exception as exc:
        if not said(exc):
            raise
        print(f"numerator: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def said(exc: Exception) -> bool:
    """Whether `exc` is an error numerator raises on purpose, with a message for a person: the
    service's (infra.errors) or the client's, when a command has loaded it."""
    client = sys.modules.get("numerator.client")
    return isinstance(exc, NumeratorError) or (
        client is not None and isinstance(exc, client.ClientError)
    )


if __name__ == "__main__":
    main()
