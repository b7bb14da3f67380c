"""The OpenAPI document served at /openapi.json."""

from __future__ import annotations

from typing import Any

from infra.counters import MAX_START, NAME
from infra.wire import MAX_COUNT

PROBLEM = {"$ref": "#/components/responses/Problem"}


def _problems(*codes: int) -> dict[str, Any]:
    return {str(code): PROBLEM for code in codes}


NAME_PARAM = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": NAME.pattern},
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
                    **_problems(409, 413, 422, 503),
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
                        "schema": {"type": "string"},
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
                        "description": "A retry with the same key returns the same values",
                        "schema": {"type": "string", "maxLength": 200},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "{counter, value, formatted} for one value; "
                        "{counter, first, last, values: [{value, formatted}]} for count > 1",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **_problems(404, 413, 422, 503, 504),
                },
            }
        },
        "/healthz": {
            "get": {
                "summary": "Health",
                "responses": {
                    "200": {"description": "Healthy"},
                    "503": {"description": "Degraded"},
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {"200": {"description": "Text exposition format"}},
            }
        },
    },
    "components": {
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
        }
    },
}
