"""The API's bodies as models (functions/bodies.py): what they refuse names the field, and the
OpenAPI document is made from them and the app's routes, one operation per route and method."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.routing import Route

from functions import bodies
from functions.app import create_app
from functions.openapi import document
from functions.problems import Problem
from functions.table import TABLE
from functions.validation import MAX_COUNT, checked, count


@pytest.mark.parametrize(
    ("model", "data", "field"),
    [
        (bodies.VoidBody, {"first": 1, "reason": "x", "colour": "red"}, "colour"),
        (bodies.VoidBody, {"first": 1}, "reason"),
        (bodies.VoidBody, {"values": [], "reason": "x"}, "values"),
        (bodies.VoidBody, {"values": [1.5], "reason": "x"}, "values"),
        (bodies.VoidBody, {"first": -1, "reason": "x"}, "first"),
        (bodies.VoidBody, {"first": "1", "reason": "x"}, "first"),
        (bodies.Heads, {"heads": {"c": {"row": 0, "hash": "0" * 64}}}, "heads"),
        (bodies.RetentionChange, {"retention_days": True}, "retention_days"),
        (bodies.RetentionChange, {}, "retention_days"),
        (bodies.VoidBody, [1], "body"),
    ],
)
def test_a_refused_body_names_its_field(model: type[Any], data: Any, field: str) -> None:
    with pytest.raises(Problem) as refused:
        checked(model, data)
    assert (refused.value.status, refused.value.extra["field"]) == (422, field)


def test_a_whole_float_is_an_integer_as_json_schema_says() -> None:
    assert checked(bodies.RetentionChange, {"retention_days": 5.0}).retention_days == 5
    assert checked(bodies.VoidBody, {"values": [2.0], "reason": "x"}).values == [2]


def test_a_query_is_read_from_text() -> None:
    assert checked(bodies.PageQuery, {"limit": "7"}, text=True).limit == 7
    with pytest.raises(Problem):
        checked(bodies.PageQuery, {"limit": "0"}, text=True)


def test_next_s_count_keeps_the_bounds_of_its_model() -> None:
    assert MAX_COUNT == 1000 and count(str(MAX_COUNT)) == MAX_COUNT
    for refused in ("0", str(MAX_COUNT + 1)):
        with pytest.raises(Problem):
            count(refused)


def test_every_route_has_its_operation_and_every_body_its_schema() -> None:
    made = document(TABLE)
    operations = {(m.upper(), p) for p, item in made["paths"].items() for m in item}
    assert operations == {(o.method, o.path) for o in TABLE.operations}
    app = create_app().app
    routed = {(m, r.path) for r in app.routes if isinstance(r, Route) for m in r.methods or ()}
    routed -= {("HEAD", path) for _, path in routed}
    assert routed == operations
    schemas = made["components"]["schemas"]
    assert {bodies.component(model) for model in bodies.COMPONENTS} <= set(schemas)
    refs = {ref.rsplit("/", 1)[1] for ref in _refs(made) if ref.startswith("#/components/schemas/")}
    assert refs <= set(schemas), refs - set(schemas)


def test_a_void_s_schema_has_its_two_shapes_from_the_model() -> None:
    void = bodies.schemas()["Void"]["oneOf"]
    assert [sorted(shape["required"]) for shape in void] == [
        ["reason", "values"],
        ["first", "reason"],
    ]
    assert "last" not in void[0]["properties"] and "values" not in void[1]["properties"]
    assert all(shape["additionalProperties"] is False for shape in void)


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for item in node for r in _refs(item)]
    return []
