"""What every route handler takes and gives besides its own: the request's Edge, and a JSON
answer rendered by orjson."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from functions.edge import Edge


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def edge_of(request: Request) -> Edge:
    edge: Edge = request.app.state.edge
    return edge
