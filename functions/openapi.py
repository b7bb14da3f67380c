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
from infra.ledger import SYSTEM_REASONS
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
    "description": "'' (never reset), YYYY, YYYY-MM or YYYY-MM-DD; default: the current one",
    "schema": {"type": "string", "pattern": f"^(?:{PERIOD.pattern})$"},
}

REASON = {
    "type": "string",
    "pattern": f"^{REASON_PATTERN.pattern}$",
    "not": {"enum": sorted(SYSTEM_REASONS)},
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

JSON_OBJECT = {"application/json": {"schema": {"type": "object"}}}
VOID_BODY = {"schema": VOID}
CONFIRM_BODY = {"schema": CONFIRM}

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
                "summary": "Create a counter",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": COUNTER}},
                },
                "responses": {
                    "201": {
                        "description": "Created; Location names it",
                        "content": {"application/json": {"schema": COUNTER}},
                    },
                    **_problems(408, 409, 413, 415, 422, 503),
                },
            },
            "get": {
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
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "counters": {"type": "array", "items": COUNTER},
                                        "next": {"type": ["string", "null"]},
                                    },
                                }
                            }
                        },
                    },
                    **_problems(422, 503),
                },
            },
        },
        "/counters/{name}": {
            "get": {
                "summary": "A counter's settings, current period and last value handed out",
                "parameters": [NAME_PARAM],
                "responses": {"200": {"description": "The counter"}, **_problems(404, 422, 503)},
            },
            "patch": {
                "summary": "Change a counter's retention (scope admin)",
                "parameters": [NAME_PARAM],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["retention_days"],
                                "additionalProperties": False,
                                "properties": {"retention_days": RETENTION},
                            }
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "The counter",
                        "content": {"application/json": {"schema": COUNTER}},
                    },
                    **_problems(404, 408, 413, 415, 422, 503),
                },
            },
        },
        "/counters/{name}/void": {
            "post": {
                "summary": "Take values out of use, for a reason (idempotent; never reused)",
                "parameters": [NAME_PARAM],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": VOID}},
                },
                "responses": {
                    "200": {"description": "The ranges voided", "content": JSON_OBJECT},
                    **_problems(404, 408, 409, 413, 415, 422, 502, 503, 504),
                },
            }
        },
        "/counters/{name}/confirm": {
            "post": {
                "summary": "Confirm values were used (a counter created to need it; idempotent)",
                "parameters": [NAME_PARAM],
                "requestBody": {"required": True, "content": {"application/json": CONFIRM_BODY}},
                "responses": {
                    "200": {"description": "The ranges confirmed", "content": JSON_OBJECT},
                    **_problems(404, 408, 409, 413, 415, 422, 502, 503, 504),
                },
            }
        },
        "/counters/{name}/report": {
            "get": {
                "summary": "The completeness report of a period: issued, voided, gaps",
                "parameters": [NAME_PARAM, PERIOD_PARAM],
                "responses": {
                    "200": {"description": "The report", "content": JSON_OBJECT},
                    **_problems(404, 422, 503),
                },
            }
        },
        "/counters/{name}/audit": {
            "get": {
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
                        "content": {**JSON_OBJECT, "text/csv": {"schema": {"type": "string"}}},
                    },
                    **_problems(404, 422, 503),
                },
            }
        },
        "/audit/verify": {
            "get": {
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
                    "200": {"description": "Every chain is sound", "content": JSON_OBJECT},
                    "409": {"description": "The first row that is not", "content": JSON_OBJECT},
                    **_problems(422, 503),
                },
            }
        },
        "/counters/{name}/next": {
            "post": {
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
                        "description": "{counter, value, formatted} for one value; "
                        "{counter, first, last, values: [{value, formatted}]} for count > 1",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **_problems(404, 413, 422, 429, 502, 503, 504),
                },
            }
        },
        "/keys": {
            "post": {
                "summary": "Create an API key (scope admin); its secret is in this answer only",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": NEW_KEY}},
                },
                "responses": {
                    "201": {
                        "description": "Created: the key, with `secret` (shown once)",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **_problems(408, 409, 413, 415, 422, 503),
                },
            },
            "get": {
                "summary": "List API keys, revoked ones too (scope admin); never their secrets",
                "responses": {
                    "200": {
                        "description": "The keys",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **_problems(503),
                },
            },
        },
        "/keys/{name}": {
            "delete": {
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
                    "200": {
                        "description": "The key, revoked",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **_problems(404, 503),
                },
            }
        },
        "/healthz": {
            "get": {
                "summary": "Health",
                "security": [],
                "responses": {
                    "200": {"description": "Healthy"},
                    "503": {"description": "Degraded"},
                    **OPEN_PROBLEMS,
                },
            }
        },
        "/metrics": {
            "get": {
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
                "summary": "A trivial answer: the yardstick the benchmark holds /next against",
                "security": [],
                "responses": {"200": {"description": "{ok: true}"}, **OPEN_PROBLEMS},
            },
            "post": {
                "summary": "The same, for POST",
                "security": [],
                "responses": {"200": {"description": "{ok: true}"}, **OPEN_PROBLEMS},
            },
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "security": [],
                "responses": {"200": {"description": "OpenAPI 3.1"}, **OPEN_PROBLEMS},
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
                "once one exists, every route but /healthz, /ping and /openapi.json needs one.",
            }
        },
        "responses": {
            "Problem": {
                "description": "An RFC 9457 problem; `type` is stable (see docs/problems.md)",
                "content": {
                    "application/problem+json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "type": {"type": "string"},
                                "title": {"type": "string"},
                                "status": {"type": "integer"},
                                "detail": {"type": "string"},
                            },
                        }
                    }
                },
            }
        },
    },
}
