"""The top floor: the command line and the local stacks that wire the parts together."""

from infra import __version__

__all__ = ["__version__"]
