"""The OpenAPI document served at /openapi.json, made of three things written once each: the
app's routes (its paths and their methods), the models of functions/bodies.py (its schemas, and
the parameters of its queries), and each operation's words here (id, summary, answers, problems).
An operation without a route, or a route without an operation, fails `document`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route

from functions import bodies
from infra import __version__


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def body(name: str) -> dict[str, Any]:
    """A JSON request body or answer of the named schema."""
    return {"application/json": {"schema": ref(name)}}


PROBLEM = {"$ref": "#/components/responses/Problem"}


@dataclass(frozen=True)
class Operation:
    """One method on one path: its `id` (a generated client's function), `tag` (its module),
    the `answers` that are not problems (status: (description, content)), the problem statuses
    it may answer, its request `body` and `query` models, and whether it is `open` to all."""

    id: str
    tag: str
    summary: str
    answers: Mapping[str, tuple[str, dict[str, Any] | None]]
    problems: tuple[int, ...] = ()
    body: str | None = None
    query: type[msgspec.Struct] | None = None
    headers: tuple[dict[str, Any], ...] = ()
    open: bool = False

    def render(self, route: Route) -> dict[str, Any]:
        parameters = [*path_parameters(route), *query_parameters(self.query), *self.headers]
        answers: dict[str, Any] = {}
        for status, (description, content) in self.answers.items():
            answers[status] = {"description": description}
            if content is not None:
                answers[status]["content"] = content
        # a route open to all answers 400 (Authorization or Idempotency-Key repeated) and 431
        # (headers over MAX_HEADER_BYTES) besides its own; one that needs a key, also 401, 403
        extra = {400, 431} if self.open else {400, 401, 403, 431}
        answers.update({str(code): PROBLEM for code in sorted({*self.problems, *extra})})
        out: dict[str, Any] = {"operationId": self.id, "summary": self.summary}
        if self.open:
            out["security"] = []
        if parameters:
            out["parameters"] = parameters
        if self.body is not None:
            out["requestBody"] = {"required": True, "content": body(self.body)}
        out["responses"] = answers
        out["tags"] = [self.tag]
        return out


def fields(model: type[msgspec.Struct]) -> dict[str, dict[str, Any]]:
    """The JSON Schema of each field of `model`."""
    schema = msgspec.json.schema(model)
    properties: dict[str, dict[str, Any]] = schema["$defs"][model.__name__]["properties"]
    return properties


def path_parameters(route: Route) -> list[dict[str, Any]]:
    """The `{name}` of a path: a key's name under /keys, else a counter's."""
    model = bodies.NewKey if route.path.startswith("/keys/") else bodies.NewCounter
    return [
        {"name": name, "in": "path", "required": True, "schema": fields(model)[name]}
        for name in route.param_convertors
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


IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "description": "A retry with the same key returns the same values; "
    "the same key with another count is 422 idempotency-key-reused",
    "schema": {"type": "string", "pattern": bodies.IDEMPOTENCY_KEY},
}
PING = {"200": ("{ok: true}", None)}
MARKED = (404, 408, 409, 413, 415, 422, 502, 503, 504)
VERIFIED = {
    "200": ("Every chain is sound", body("Verification")),
    "409": ("Each table and row that is not", body("Verification")),
}

OPERATIONS: dict[tuple[str, str], Operation] = {
    ("POST", "/counters"): Operation(
        "createCounter",
        "counters",
        "Create a counter",
        {"201": ("Created; Location names it", body("Counter"))},
        (408, 409, 413, 415, 422, 503),
        body="NewCounter",
    ),
    ("GET", "/counters"): Operation(
        "listCounters",
        "counters",
        "List counters by name, a page at a time",
        {"200": ("A page; `next` is null on the last one", body("CounterPage"))},
        (422, 503),
        query=bodies.PageQuery,
    ),
    ("GET", "/counters/{name}"): Operation(
        "getCounter",
        "counters",
        "A counter's settings, current period and last value handed out",
        {"200": ("The counter", body("Counter"))},
        (404, 422, 503),
    ),
    ("PATCH", "/counters/{name}"): Operation(
        "changeRetention",
        "counters",
        "Change a counter's retention (scope admin)",
        {"200": ("The counter", body("Counter"))},
        (404, 408, 413, 415, 422, 503),
        body="RetentionChange",
    ),
    ("POST", "/counters/{name}/next"): Operation(
        "nextValues",
        "counters",
        "The next value, or the next `count` consecutive values",
        {
            "200": (
                "Value for one value; Values for count > 1",
                {"application/json": {"schema": {"oneOf": [ref("Value"), ref("Values")]}}},
            )
        },
        (404, 413, 422, 429, 502, 503, 504),
        query=bodies.NextQuery,
        headers=(IDEMPOTENCY_KEY,),
    ),
    ("POST", "/counters/{name}/void"): Operation(
        "voidValues",
        "ledger",
        "Take values out of use, for a reason (idempotent; never reused)",
        {"200": ("The ranges voided", body("Voided"))},
        MARKED,
        body="Void",
    ),
    ("POST", "/counters/{name}/confirm"): Operation(
        "confirmValues",
        "ledger",
        "Confirm values were used (a counter created to need it; idempotent)",
        {"200": ("The ranges confirmed", body("Confirmed"))},
        MARKED,
        body="Confirmation",
    ),
    ("GET", "/counters/{name}/report"): Operation(
        "getReport",
        "ledger",
        "The completeness report of a period: issued, voided, gaps",
        {"200": ("The report", body("Report"))},
        (404, 422, 503),
        query=bodies.PeriodQuery,
    ),
    ("GET", "/counters/{name}/audit"): Operation(
        "exportAudit",
        "ledger",
        "The audit export of a period: who took each value, voids, hashes",
        {
            "200": (
                "The export",
                {**body("AuditExport"), "text/csv": {"schema": {"type": "string"}}},
            )
        },
        (404, 422, 503),
        query=bodies.AuditQuery,
    ),
    ("GET", "/audit/verify"): Operation(
        "verifyAudit",
        "ledger",
        "Recompute the audit trail's hash chains",
        VERIFIED,
        (422, 503),
        query=bodies.VerifyQuery,
    ),
    ("POST", "/audit/verify"): Operation(
        "verifyAuditHeads",
        "ledger",
        "Verify, and prove the chains still hold heads anchored earlier",
        {**VERIFIED, "200": ("Sound, and every anchored head held or pruned", VERIFIED["200"][1])},
        (408, 413, 415, 422, 503),
        body="Heads",
        query=bodies.VerifyQuery,
    ),
    ("GET", "/audit/heads"): Operation(
        "getHeads",
        "ledger",
        "Each hash chain's head: what to keep outside Postgres",
        {"200": ("The heads", body("Heads"))},
        (503,),
    ),
    ("POST", "/keys"): Operation(
        "createKey",
        "keys",
        "Create an API key (scope admin); its secret is in this answer only",
        {"201": ("Created: the key, with `secret` (shown once)", body("Key"))},
        (408, 409, 413, 415, 422, 503),
        body="NewKey",
    ),
    ("GET", "/keys"): Operation(
        "listKeys",
        "keys",
        "List API keys, revoked ones too (scope admin); never their secrets",
        {"200": ("The keys", body("KeyList"))},
        (503,),
    ),
    ("DELETE", "/keys/{name}"): Operation(
        "revokeKey",
        "keys",
        "Revoke the unrevoked key of this name (scope admin)",
        {"200": ("The key, revoked", body("Key"))},
        (404, 503),
    ),
    ("GET", "/healthz"): Operation(
        "getHealth",
        "service",
        "Health",
        {"200": ("Healthy", body("Health")), "503": ("Degraded", body("Health"))},
        open=True,
    ),
    ("GET", "/metrics"): Operation(
        "getMetrics",
        "service",
        "Prometheus metrics (scope read)",
        {"200": ("Text exposition format", {"text/plain": {"schema": {"type": "string"}}})},
    ),
    ("GET", "/ping"): Operation(
        "ping",
        "service",
        "A trivial answer: the yardstick the benchmark holds /next against",
        PING,
        open=True,
    ),
    ("POST", "/ping"): Operation("pingPost", "service", "The same, for POST", PING, open=True),
    ("GET", "/openapi.json"): Operation(
        "getOpenapi",
        "service",
        "This OpenAPI 3.1 document: every route, body and problem",
        {"200": ("OpenAPI 3.1", None)},
        open=True,
    ),
    ("GET", "/"): Operation(
        "getIndex",
        "service",
        "A page for a browser: what this is, these routes, where to read on",
        {"200": ("HTML, static", None)},
        open=True,
    ),
}

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


def document(routes: Sequence[BaseRoute]) -> dict[str, Any]:
    """The OpenAPI document of an app with these `routes`."""
    paths: dict[str, dict[str, Any]] = {}
    served = set()
    for route in routes:
        if not isinstance(route, Route):
            continue
        for method in sorted((route.methods or set()) - {"HEAD"}):
            operation = OPERATIONS.get((method, route.path))
            if operation is None:
                raise LookupError(f"{method} {route.path} has no operation in OPERATIONS")
            paths.setdefault(route.path, {})[method.lower()] = operation.render(route)
            served.add((method, route.path))
    unrouted = sorted(set(OPERATIONS) - served)
    if unrouted:
        raise LookupError(f"operations without a route: {unrouted}")
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
        made = app.state.openapi = document(app.routes)
    return made
