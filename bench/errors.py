class BenchError(Exception):
    """A run cannot go on: the message says why, for a person."""
