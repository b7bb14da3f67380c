"""Each route declared once (functions/table.py): a toy route added to a table of its own is
served by the app, listed in the OpenAPI document and on the page at /, and admitted by the scope
it declares — with nothing written anywhere else."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from functions.app import create_app
from functions.edge import Edge
from functions.index import rendered
from functions.openapi import SECURITY, body, served
from functions.operations import Operation, Table
from functions.table import TABLE
from infra.adapters.memory import MemoryReplies, MemoryStream
from infra.keys import Key, Need, new
from infra.observe.metrics import Metrics
from infra.settings import Settings
from tests.asgi import asgi_client


async def toy(request: Request) -> Response:
    return JSONResponse({"toy": request.path_params["name"]})


TOY = Operation(
    "GET",
    "/toys/{name}",
    toy,
    Need.ADMIN,
    "getToy",
    "service",
    "A toy, declared in one place",
    {"200": ("The toy", body("Counter"))},
    (404,),
)


class Keyring:
    """API keys in memory, as the edge's store serves them."""

    def __init__(self, *keys: Key) -> None:
        self.held = list(keys)

    async def keys(self) -> list[Key]:
        return self.held

    async def key(self, key_id: str) -> Key | None:
        return next((key for key in self.held if key.id == key_id), None)

    async def touch_keys(self, used: object) -> None:
        return None

    async def ping(self) -> None:
        return None


def test_a_toy_route_s_scope_and_operation_come_from_its_one_declaration() -> None:
    table = Table((*TABLE.operations, TOY))
    assert table.need("GET", "/toys/bear", None) == (Need.ADMIN, "")
    assert table.need("HEAD", "/toys/bear", None) == (Need.ADMIN, "")
    assert TABLE.need("GET", "/toys/bear", None) == (Need.READ, "")  # unknown there: a 404
    made = create_app(table=table).app
    toy_path = served(made)["paths"]["/toys/{name}"]
    assert list(toy_path) == ["get"]
    assert toy_path["get"]["operationId"] == "getToy" and "security" not in toy_path["get"]
    assert [p["name"] for p in toy_path["get"]["parameters"]] == ["name"]
    assert {"401", "403", "404"} <= set(toy_path["get"]["responses"])
    assert "<code>/toys/{name}</code>" in rendered(made)


def test_a_route_is_declared_once() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        Table((*TABLE.operations, TOY, TOY))


async def test_a_toy_route_is_admitted_by_the_scope_it_declares() -> None:
    now = datetime.now(UTC)
    admin, admin_secret = new("ops", ["admin"], now)
    reader, reader_secret = new("eyes", ["read"], now)
    edge = Edge(
        MemoryStream(),
        MemoryReplies(),
        Keyring(admin, reader),  # type: ignore[arg-type]
        Settings.of(),
        Metrics(),
    )
    app = create_app(edge, table=Table((*TABLE.operations, TOY)))
    async with asgi_client(app, base_url="http://numerator") as client:

        async def get(secret: str | None, method: str = "GET") -> httpx.Response:
            headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
            return await client.request(method, "/toys/bear", headers=headers)

        assert (await get(None)).status_code == 401
        assert (await get(reader_secret)).status_code == 403
        answered = await get(admin_secret)
        assert answered.status_code == 200 and answered.json() == {"toy": "bear"}
        # a method the path does not declare: admitted as the path's (admin) operations, a 405
        assert (await get(reader_secret, "DELETE")).status_code == 403
        assert (await get(admin_secret, "DELETE")).status_code == 405
        document: dict[str, Any] = (await client.get("/openapi.json")).json()
        assert "/toys/{name}" in document["paths"]


def test_the_readme_s_route_table_lists_the_table_s_routes() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    listed = set()
    for cell in re.findall(r"^\| `([A-Z`/]+ /.*?)` \| ", readme, re.MULTILINE):
        methods, _, path = cell.partition(" ")
        for method in methods.replace("`", "").split("/"):
            listed.add((method, path.partition("?")[0]))
    assert listed == {(o.method, o.path) for o in TABLE.operations}


def test_the_open_routes_the_document_names_are_the_table_s() -> None:
    said = SECURITY["bearer"]["description"].split("every route but ")[1]
    named = set(re.findall(r"/[\w.]*", said))
    assert named == {o.path for o in TABLE.operations if o.open}
