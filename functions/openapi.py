"""The OpenAPI document served at /openapi.json, made of two things written once each: the route
table (functions/table.py: each operation's path, method, words and whether it is open) and the
models of functions/bodies.py (its schemas, and the parameters of its queries)."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.applications import Starlette

from functions import bodies
from functions.operations import Operation, Table, path_names
from infra import __version__


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def body(name: str) -> dict[str, Any]:
    """A JSON request body or answer of the named schema."""
    return {"application/json": {"schema": ref(name)}}


PROBLEM = {"$ref": "#/components/responses/Problem"}


def render(operation: Operation) -> dict[str, Any]:
    """The OpenAPI object of one operation."""
    parameters = [
        *path_parameters(operation.path),
        *query_parameters(operation.query),
        *operation.headers,
    ]
    answers: dict[str, Any] = {}
    for status, (description, content) in operation.answers.items():
        answers[status] = {"description": description}
        if content is not None:
            answers[status]["content"] = content
    # a route open to all answers 400 (Authorization or Idempotency-Key repeated) and 431
    # (headers over MAX_HEADER_BYTES) besides its own; one that needs a key, also 401, 403
    extra = {400, 431} if operation.open else {400, 401, 403, 431}
    answers.update({str(code): PROBLEM for code in sorted({*operation.problems, *extra})})
    out: dict[str, Any] = {"operationId": operation.id, "summary": operation.summary}
    if operation.open:
        out["security"] = []
    if parameters:
        out["parameters"] = parameters
    if operation.body is not None:
        out["requestBody"] = {"required": True, "content": body(operation.body)}
    out["responses"] = answers
    out["tags"] = [operation.tag]
    return out


def fields(model: type[msgspec.Struct]) -> dict[str, dict[str, Any]]:
    """The JSON Schema of each field of `model`."""
    schema = msgspec.json.schema(model)
    properties: dict[str, dict[str, Any]] = schema["$defs"][model.__name__]["properties"]
    return properties


def path_parameters(path: str) -> list[dict[str, Any]]:
    """The `{name}` of a path: a key's name under /keys, else a counter's."""
    model = bodies.NewKey if path.startswith("/keys/") else bodies.NewCounter
    return [
        {"name": name, "in": "path", "required": True, "schema": fields(model)[name]}
        for name in path_names(path)
    ]


def query_parameters(model: type[msgspec.Struct] | None) -> list[dict[str, Any]]:
    """A query model's fields as parameters, each with its schema and description."""
    if model is None:
        return []
    out = []
    for name, schema in fields(model).items():
        about = schema.pop("description", None)
        parameter = {"name": name, "in": "query", "schema": schema}
        if about is not None:
            parameter["description"] = about
        out.append(parameter)
    return out


TAGS = ("counters", "ledger", "keys", "service")
"""Each operation's group: a generated client's modules (api.counters.next_values, ...)."""

SECURITY = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key, `nmr_…` (`numerator keys create`). Before the first "
        "key exists, clients on the service's own machine need none (protected mode); "
        "once one exists, every route but /, /healthz, /ping and /openapi.json needs one.",
    }
}


def document(table: Table) -> dict[str, Any]:
    """The OpenAPI document of an app with the routes of `table`."""
    paths: dict[str, dict[str, Any]] = {}
    for path, methods in table.paths.items():
        for method in sorted(methods):
            paths.setdefault(path, {})[method.lower()] = render(methods[method])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "numerator",
            "version": __version__,
            "description": "Unique, increasing, formatted numbers from named counters.",
        },
        "paths": paths,
        "security": [{"bearer": []}, {}],
        "tags": [{"name": tag} for tag in TAGS],
        "components": {
            "securitySchemes": SECURITY,
            "schemas": bodies.schemas(),
            "responses": {
                "Problem": {
                    "description": "An RFC 9457 problem; `type` is stable (see docs/problems.md)",
                    "content": {"application/problem+json": {"schema": ref("Problem")}},
                }
            },
        },
    }


def served(app: Starlette) -> dict[str, Any]:
    """The document of `app`, made at its first ask and kept in its state."""
    made: dict[str, Any] | None = getattr(app.state, "openapi", None)
    if made is None:
        made = app.state.openapi = document(app.state.table)
    return made
