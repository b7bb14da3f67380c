"""The OpenAPI document served at /openapi.json."""

from __future__ import annotations

from typing import Any

from functions.ledger import MAX_VALUES, PERIOD
from functions.ledger import REASON as REASON_PATTERN
from functions.validation import IDEMPOTENCY_KEY
from infra.counters import MAX_RETENTION, MAX_START, MAX_TEMPLATE, NAME, TEMPLATE
from infra.keys import MAX_PATTERN, MAX_SCOPES
from infra.keys import NAME as KEY_NAME
from infra.keys import PATTERN as SCOPE_PATTERN
from infra.ledger import reserved_pattern
from infra.wire import MAX_COUNT, MAX_VALUE

PROBLEM = {"$ref": "#/components/responses/Problem"}


def _problems(*codes: int) -> dict[str, Any]:
    """Problem responses: these, and what any route that needs a key may answer (401, 403)
    and any request at all (431: headers over MAX_HEADER_BYTES)."""
    return {str(code): PROBLEM for code in sorted({*codes, 401, 403, 431})}


OPEN_PROBLEMS = {"431": PROBLEM}
"""What a route open to all may answer besides its own: 431 (headers over MAX_HEADER_BYTES)."""


NEW_KEY = {
    "type": "object",
    "required": ["name", "scopes"],
    "properties": {
        "name": {"type": "string", "pattern": KEY_NAME.pattern},
        "scopes": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_SCOPES,
            "items": {
                "type": "string",
                "maxLength": len("next:") + MAX_PATTERN,
                "pattern": f"^(admin|read|next:{SCOPE_PATTERN.pattern.strip('^$')})$",
            },
        },
    },
}

NAME_PARAM = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": NAME.pattern},
}

RETENTION = {
    "type": ["integer", "null"],
    "minimum": 1,
    "maximum": MAX_RETENTION,
    "default": None,
    "description": "How long the audit trail of a period is kept after it ends; "
    "null: the service's AUDIT_RETENTION_S.",
}

COUNTER = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": NAME.pattern},
        "start": {"type": "integer", "minimum": 0, "maximum": MAX_START, "default": 1},
        "template": {
            "type": "string",
            "default": "{value}",
            "minLength": 1,
            "maxLength": MAX_TEMPLATE,
            "pattern": TEMPLATE.pattern,
            "description": "Python format string over {value} (with a format spec such as "
            "{value:06d}), {yyyy}, {yy}, {mm}, {dd}; must contain {value}.",
            "example": "INV-{yyyy}-{value:06d}",
        },
        "reset": {
            "type": "string",
            "enum": ["never", "yearly", "monthly", "daily"],
            "default": "never",
        },
        "timezone": {"type": "string", "default": "UTC", "example": "Europe/Berlin"},
        "retention_days": RETENTION,
        "confirm": {
            "type": "string",
            "enum": ["none", "required"],
            "default": "none",
            "description": "required: each value must be confirmed within CONFIRM_TTL_S, "
            "else it is voided, not-confirmed",
        },
    },
}

PERIOD_PARAM = {
    "name": "period",
    "in": "query",
    "description": "the form the counter's reset takes: '' (never), YYYY (yearly), "
    "YYYY-MM (monthly) or YYYY-MM-DD (daily); another is 422; default: the current one",
    "schema": {"type": "string", "pattern": f"^(?:{PERIOD.pattern})$"},
}

REASON = {
    "type": "string",
    "pattern": f"^{REASON_PATTERN.pattern}$",
    "not": {"pattern": reserved_pattern()},
    "description": "why, for the audit trail (numerator's own reasons are refused)",
    "example": "invoice cancelled: order 17 refunded",
}

VALUE = {"type": "integer", "minimum": 0, "maximum": MAX_VALUE}


def marking(**extra: Any) -> dict[str, Any]:
    """The body of a void or a confirmation: `values`, or `first` (and `last`), in `period`;
    and the `extra` fields, all required."""
    values = {"type": "array", "minItems": 1, "maxItems": MAX_VALUES, "items": VALUE}
    last = {**VALUE, "description": "default: first"}
    return {
        "oneOf": [
            {
                "type": "object",
                "required": ["values", *extra],
                "additionalProperties": False,
                "properties": {"values": values, **extra, "period": PERIOD_PARAM["schema"]},
            },
            {
                "type": "object",
                "required": ["first", *extra],
                "additionalProperties": False,
                "properties": {
                    "first": VALUE,
                    "last": last,
                    **extra,
                    "period": PERIOD_PARAM["schema"],
                },
            },
        ]
    }


VOID = marking(reason=REASON)
CONFIRM = marking()


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def body(name: str) -> dict[str, Any]:
    """A JSON request body or answer of the named schema."""
    return {"application/json": {"schema": ref(name)}}


RANGE = {
    "type": "object",
    "required": ["first", "last"],
    "properties": {"first": VALUE, "last": VALUE},
}
COUNTER_SETTINGS: dict[str, Any] = dict(COUNTER["properties"])  # type: ignore[call-overload]

SCHEMAS: dict[str, Any] = {
    "NewCounter": COUNTER,
    "Counter": {
        "type": "object",
        "description": "A counter's settings; from GET, also the current `period` and the last "
        "`value` handed out in it (null before the first)",
        "required": list(COUNTER_SETTINGS),
        "properties": {
            **COUNTER_SETTINGS,
            "value": {"type": ["integer", "null"]},
            "period": {"type": "string"},
        },
    },
    "CounterPage": {
        "type": "object",
        "required": ["counters", "next"],
        "properties": {
            "counters": {"type": "array", "items": ref("Counter")},
            "next": {"type": ["string", "null"], "description": "`after` for the next page"},
        },
    },
    "RetentionChange": {
        "type": "object",
        "required": ["retention_days"],
        "additionalProperties": False,
        "properties": {"retention_days": RETENTION},
    },
    "Value": {
        "type": "object",
        "description": "One value (count=1)",
        "required": ["counter", "value", "formatted"],
        "properties": {
            "counter": {"type": "string"},
            "value": VALUE,
            "formatted": {"type": "string"},
        },
    },
    "FormattedValue": {
        "type": "object",
        "required": ["value", "formatted"],
        "properties": {"value": VALUE, "formatted": {"type": "string"}},
    },
    "Values": {
        "type": "object",
        "description": "`count` consecutive values (count > 1)",
        "required": ["counter", "first", "last", "values"],
        "properties": {
            "counter": {"type": "string"},
            "first": VALUE,
            "last": VALUE,
            "values": {"type": "array", "items": ref("FormattedValue")},
        },
    },
    "Void": VOID,
    "Confirmation": CONFIRM,
    "Range": RANGE,
    "Voided": {
        "type": "object",
        "required": ["counter", "period", "voided", "reason"],
        "properties": {
            "counter": {"type": "string"},
            "period": {"type": "string"},
            "voided": {"type": "array", "items": ref("Range")},
            "reason": {"type": "string"},
        },
    },
    "Confirmed": {
        "type": "object",
        "required": ["counter", "period", "confirmed"],
        "properties": {
            "counter": {"type": "string"},
            "period": {"type": "string"},
            "confirmed": {"type": "array", "items": ref("Range")},
        },
    },
    "Report": {
        "type": "object",
        "description": "The completeness report of a period (docs/invoices.md)",
        "required": [
            "counter",
            "period",
            "issued",
            "delivered",
            "voided",
            "voids",
            "unsure",
            "unsure_runs",
            "unexplained_gaps",
            "gaps",
            "issued_twice",
            "rising",
        ],
        "properties": {
            "counter": {"type": "string"},
            "period": {"type": "string"},
            "start": {"type": "integer"},
            "first": {"type": ["integer", "null"]},
            "last": {"type": ["integer", "null"]},
            "issued": {"type": "integer"},
            "delivered": {"type": "integer"},
            "voided": {"type": "object", "additionalProperties": {"type": "integer"}},
            "voids": {"type": "array", "items": {"type": "object"}},
            "unsure": {"type": "integer"},
            "unsure_runs": {"type": "array", "items": {"type": "object"}},
            "unexplained_gaps": {"type": "integer"},
            "gaps": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
            "issued_twice": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "integer"}},
            },
            "rising": {"type": "boolean"},
        },
    },
    "AuditExport": {
        "type": "object",
        "required": ["counter", "period", "rows"],
        "properties": {
            "counter": {"type": "string"},
            "period": {"type": "string"},
            "rows": {"type": "array", "items": {"type": "object"}},
        },
    },
    "Verification": {
        "type": "object",
        "required": ["ok"],
        "properties": {"ok": {"type": "boolean"}},
    },
    "Heads": {
        "type": "object",
        "required": ["heads"],
        "properties": {
            "heads": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": {
                    "type": "object",
                    "required": ["row", "hash"],
                    "properties": {
                        "row": {"type": "integer", "minimum": 1, "maximum": MAX_VALUE},
                        "hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                        "at": {"type": "string"},
                    },
                },
            }
        },
    },
    "NewKey": NEW_KEY,
    "Key": {
        "type": "object",
        "required": ["id", "name", "scopes", "created", "last_used", "revoked"],
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "scopes": {"type": "array", "items": {"type": "string"}},
            "created": {"type": "string"},
            "last_used": {"type": ["string", "null"]},
            "revoked": {"type": ["string", "null"]},
            "secret": {"type": "string", "description": "only when the key is created"},
        },
    },
    "KeyList": {
        "type": "object",
        "required": ["keys"],
        "properties": {"keys": {"type": "array", "items": ref("Key")}},
    },
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string", "enum": ["ok", "degraded"]}},
    },
    "Problem": {
        "type": "object",
        "description": "An RFC 9457 problem; `type` is stable (see docs/problems.md)",
        "required": ["type", "title", "status"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
        },
    },
}

SCHEMA: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "numerator",
        "version": "0.1.0",
        "description": "Unique, increasing, formatted numbers from named counters.",
    },
    "paths": {
        "/counters": {
            "post": {
                "operationId": "createCounter",
                "summary": "Create a counter",
                "requestBody": {"required": True, "content": body("NewCounter")},
                "responses": {
                    "201": {
                        "description": "Created; Location names it",
                        "content": body("Counter"),
                    },
                    **_problems(408, 409, 413, 415, 422, 503),
                },
            },
            "get": {
                "operationId": "listCounters",
                "summary": "List counters by name, a page at a time",
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": 1000,
                            "default": 100,
                        },
                    },
                    {
                        "name": "after",
                        "in": "query",
                        "description": "the `next` of the last page",
                        "schema": {"type": "string", "pattern": NAME.pattern},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "A page; `next` is null on the last one",
                        "content": body("CounterPage"),
                    },
                    **_problems(422, 503),
                },
            },
        },
        "/counters/{name}": {
            "get": {
                "operationId": "getCounter",
                "summary": "A counter's settings, current period and last value handed out",
                "parameters": [NAME_PARAM],
                "responses": {
                    "200": {"description": "The counter", "content": body("Counter")},
                    **_problems(404, 422, 503),
                },
            },
            "patch": {
                "operationId": "changeRetention",
                "summary": "Change a counter's retention (scope admin)",
                "parameters": [NAME_PARAM],
                "requestBody": {"required": True, "content": body("RetentionChange")},
                "responses": {
                    "200": {"description": "The counter", "content": body("Counter")},
                    **_problems(404, 408, 413, 415, 422, 503),
                },
            },
        },
        "/counters/{name}/void": {
            "post": {
                "operationId": "voidValues",
                "summary": "Take values out of use, for a reason (idempotent; never reused)",
                "parameters": [NAME_PARAM],
                "requestBody": {"required": True, "content": body("Void")},
                "responses": {
                    "200": {"description": "The ranges voided", "content": body("Voided")},
                    **_problems(404, 408, 409, 413, 415, 422, 502, 503, 504),
                },
            }
        },
        "/counters/{name}/confirm": {
            "post": {
                "operationId": "confirmValues",
                "summary": "Confirm values were used (a counter created to need it; idempotent)",
                "parameters": [NAME_PARAM],
                "requestBody": {"required": True, "content": body("Confirmation")},
                "responses": {
                    "200": {"description": "The ranges confirmed", "content": body("Confirmed")},
                    **_problems(404, 408, 409, 413, 415, 422, 502, 503, 504),
                },
            }
        },
        "/counters/{name}/report": {
            "get": {
                "operationId": "getReport",
                "summary": "The completeness report of a period: issued, voided, gaps",
                "parameters": [NAME_PARAM, PERIOD_PARAM],
                "responses": {
                    "200": {"description": "The report", "content": body("Report")},
                    **_problems(404, 422, 503),
                },
            }
        },
        "/counters/{name}/audit": {
            "get": {
                "operationId": "exportAudit",
                "summary": "The audit export of a period: who took each value, voids, hashes",
                "parameters": [
                    NAME_PARAM,
                    PERIOD_PARAM,
                    {
                        "name": "format",
                        "in": "query",
                        "schema": {"type": "string", "enum": ["json", "csv"], "default": "json"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The export",
                        "content": {
                            **body("AuditExport"),
                            "text/csv": {"schema": {"type": "string"}},
                        },
                    },
                    **_problems(404, 422, 503),
                },
            }
        },
        "/audit/verify": {
            "get": {
                "operationId": "verifyAudit",
                "summary": "Recompute the audit trail's hash chains",
                "parameters": [
                    {
                        "name": "counter",
                        "in": "query",
                        "description": "only the chains holding this counter's rows",
                        "schema": {"type": "string", "pattern": NAME.pattern},
                    }
                ],
                "responses": {
                    "200": {"description": "Every chain is sound", "content": body("Verification")},
                    "409": {
                        "description": "Each table and row that is not",
                        "content": body("Verification"),
                    },
                    **_problems(422, 503),
                },
            },
            "post": {
                "operationId": "verifyAuditHeads",
                "summary": "Verify, and prove the chains still hold heads anchored earlier",
                "parameters": [
                    {
                        "name": "counter",
                        "in": "query",
                        "description": "only the chains holding this counter's rows",
                        "schema": {"type": "string", "pattern": NAME.pattern},
                    }
                ],
                "requestBody": {"required": True, "content": body("Heads")},
                "responses": {
                    "200": {
                        "description": "Sound, and every anchored head held or pruned",
                        "content": body("Verification"),
                    },
                    "409": {
                        "description": "Each table and row that is not",
                        "content": body("Verification"),
                    },
                    **_problems(408, 413, 415, 422, 503),
                },
            },
        },
        "/audit/heads": {
            "get": {
                "operationId": "getHeads",
                "summary": "Each hash chain's head: what to keep outside Postgres",
                "responses": {
                    "200": {"description": "The heads", "content": body("Heads")},
                    **_problems(503),
                },
            }
        },
        "/counters/{name}/next": {
            "post": {
                "operationId": "nextValues",
                "summary": "The next value, or the next `count` consecutive values",
                "parameters": [
                    NAME_PARAM,
                    {
                        "name": "count",
                        "in": "query",
                        "schema": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_COUNT,
                            "default": 1,
                        },
                    },
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "description": "A retry with the same key returns the same values; "
                        "the same key with another count is 422 idempotency-key-reused",
                        "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY.pattern},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "Value for one value; Values for count > 1",
                        "content": {
                            "application/json": {"schema": {"oneOf": [ref("Value"), ref("Values")]}}
                        },
                    },
                    **_problems(404, 413, 422, 429, 502, 503, 504),
                },
            }
        },
        "/keys": {
            "post": {
                "operationId": "createKey",
                "summary": "Create an API key (scope admin); its secret is in this answer only",
                "requestBody": {"required": True, "content": body("NewKey")},
                "responses": {
                    "201": {
                        "description": "Created: the key, with `secret` (shown once)",
                        "content": body("Key"),
                    },
                    **_problems(408, 409, 413, 415, 422, 503),
                },
            },
            "get": {
                "operationId": "listKeys",
                "summary": "List API keys, revoked ones too (scope admin); never their secrets",
                "responses": {
                    "200": {"description": "The keys", "content": body("KeyList")},
                    **_problems(503),
                },
            },
        },
        "/keys/{name}": {
            "delete": {
                "operationId": "revokeKey",
                "summary": "Revoke the unrevoked key of this name (scope admin)",
                "parameters": [
                    {
                        "name": "name",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "pattern": KEY_NAME.pattern},
                    }
                ],
                "responses": {
                    "200": {"description": "The key, revoked", "content": body("Key")},
                    **_problems(404, 503),
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "getHealth",
                "summary": "Health",
                "security": [],
                "responses": {
                    "200": {"description": "Healthy", "content": body("Health")},
                    "503": {"description": "Degraded", "content": body("Health")},
                    **OPEN_PROBLEMS,
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "getMetrics",
                "summary": "Prometheus metrics (scope read)",
                "responses": {
                    "200": {
                        "description": "Text exposition format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_problems(),
                },
            }
        },
        "/ping": {
            "get": {
                "operationId": "ping",
                "summary": "A trivial answer: the yardstick the benchmark holds /next against",
                "security": [],
                "responses": {"200": {"description": "{ok: true}"}, **OPEN_PROBLEMS},
            },
            "post": {
                "operationId": "pingPost",
                "summary": "The same, for POST",
                "security": [],
                "responses": {"200": {"description": "{ok: true}"}, **OPEN_PROBLEMS},
            },
        },
        "/openapi.json": {
            "get": {
                "operationId": "getOpenapi",
                "summary": "This OpenAPI 3.1 document: every route, body and problem",
                "security": [],
                "responses": {"200": {"description": "OpenAPI 3.1"}, **OPEN_PROBLEMS},
            }
        },
        "/": {
            "get": {
                "operationId": "getIndex",
                "summary": "A page for a browser: what this is, these routes, where to read on",
                "security": [],
                "responses": {"200": {"description": "HTML, static"}, **OPEN_PROBLEMS},
            }
        },
    },
    "security": [{"bearer": []}, {}],
    "components": {
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "An API key, `nmr_…` (`numerator keys create`). Before the first "
                "key exists, clients on the service's own machine need none (protected mode); "
                "once one exists, every route but /, /healthz, /ping and /openapi.json needs one.",
            }
        },
        "schemas": SCHEMAS,
        "responses": {
            "Problem": {
                "description": "An RFC 9457 problem; `type` is stable (see docs/problems.md)",
                "content": {"application/problem+json": {"schema": ref("Problem")}},
            }
        },
    },
}

TAGS = {
    "counters": ("createCounter", "listCounters", "getCounter", "changeRetention", "nextValues"),
    "ledger": (
        "voidValues",
        "confirmValues",
        "getReport",
        "exportAudit",
        "verifyAudit",
        "verifyAuditHeads",
        "getHeads",
    ),
    "keys": ("createKey", "listKeys", "revokeKey"),
    "service": ("getHealth", "getMetrics", "ping", "pingPost", "getOpenapi", "getIndex"),
}
"""Each operation's group: a generated client's modules (api.counters.next_values, ...)."""

SCHEMA["tags"] = [{"name": tag} for tag in TAGS]
for _path in SCHEMA["paths"].values():
    for _operation in _path.values():
        _operation["tags"] = [t for t, ids in TAGS.items() if _operation["operationId"] in ids]
