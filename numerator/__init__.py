"""The top floor: the command line and the local stack that wires the parts together."""

__version__ = "0.1.0"
