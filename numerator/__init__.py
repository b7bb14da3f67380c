"""The top floor: the command line and the local stacks that wire the parts together; and the
Python client (`from numerator import Client, AsyncClient, NotFound, ...`), imported only when
asked for, so that the CLI starts without it."""

from typing import TYPE_CHECKING, Any

from infra import __version__

if TYPE_CHECKING:
    from numerator.client import (
        AsyncClient,
        BadRequest,
        BadURL,
        Client,
        ClientError,
        Conflict,
        Forbidden,
        NotFound,
        ServiceUnavailable,
        StatusError,
        TooMany,
        Unauthorized,
        Unreachable,
    )

__all__ = [
    "AsyncClient",
    "BadRequest",
    "BadURL",
    "Client",
    "ClientError",
    "Conflict",
    "Forbidden",
    "NotFound",
    "ServiceUnavailable",
    "StatusError",
    "TooMany",
    "Unauthorized",
    "Unreachable",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from numerator import client

        return getattr(client, name)
    raise AttributeError(f"module 'numerator' has no attribute {name!r}")
