"""The bodies the HTTP API takes and answers, as typed models (msgspec): the OpenAPI document's
`components/schemas` are derived from them (functions/openapi.py), and the bodies a client sends
are checked by them (functions/validation.py `checked`), so the two cannot disagree. Why msgspec
and not pydantic: docs/architecture.md, "Typed bodies" (measured by bench/bodies.py).

A model checks a body's shape and bounds; what only the domain can tell (a template that renders,
a time zone that exists, a scope's glob) is checked where the domain is (infra/).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from infra.counters import (
    MAX_RETENTION,
    MAX_START,
    MAX_TEMPLATE,
    NAME,
    TEMPLATE,
    ConfirmMode,
    Reset,
)
from infra.keys import MAX_PATTERN, MAX_SCOPES
from infra.keys import NAME as KEY_NAME
from infra.keys import PATTERN as SCOPE_PATTERN
from infra.ledger import reserved_pattern
from infra.wire import MAX_COUNT, MAX_VALUE

MAX_VALUES = 500  # a body of 500 values of 19 digits stays under MAX_BODY_BYTES
PERIOD = r"^(?:|[0-9]{4}(-[0-9]{2}(-[0-9]{2})?)?)$"
REASON = r"^[^\x00-\x1f\x7f]{1,200}$"
HASH = r"^[0-9a-f]{64}$"
IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,200}$"
MAX_PAGE = 1000

Name = Annotated[str, Meta(pattern=NAME.pattern)]
Number = Annotated[int, Meta(ge=0, le=MAX_VALUE)]
Period = Annotated[
    str,
    Meta(
        pattern=PERIOD,
        description="the form the counter's reset takes: '' (never), YYYY (yearly), YYYY-MM "
        "(monthly) or YYYY-MM-DD (daily); another is 422; default: the current one",
    ),
]
Retention = Annotated[
    Annotated[int, Meta(ge=1, le=MAX_RETENTION)] | None,
    Meta(
        description="How long the audit trail of a period is kept after it ends; "
        "null: the service's AUDIT_RETENTION_S."
    ),
]
Confirm = Annotated[
    ConfirmMode,
    Meta(
        description="required: each value must be confirmed within CONFIRM_TTL_S, else it is "
        "voided, not-confirmed"
    ),
]
Template = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_TEMPLATE,
        pattern=TEMPLATE.pattern,
        description="Python format string over {value} (with a format spec such as "
        "{value:06d}), {yyyy}, {yy}, {mm}, {dd}; must contain {value}.",
        examples=["INV-{yyyy}-{value:06d}"],
    ),
]
Reason = Annotated[
    str,
    Meta(
        pattern=REASON,
        description="why, for the audit trail (numerator's own reasons are refused)",
        examples=["invoice cancelled: order 17 refunded"],
        extra_json_schema={"not": {"pattern": reserved_pattern()}},
    ),
]
Scope = Annotated[
    str,
    Meta(
        max_length=len("next:") + MAX_PATTERN,
        pattern=f"^(admin|read|next:{SCOPE_PATTERN.pattern.strip('^$')})$",
    ),
]


# What a client sends.


class NewCounter(Struct, forbid_unknown_fields=True):
    name: Name
    start: Annotated[int, Meta(ge=0, le=MAX_START)] = 1
    template: Template = "{value}"
    reset: Reset = Reset.NEVER
    timezone: Annotated[str, Meta(examples=["Europe/Berlin"])] = "UTC"
    retention_days: Retention = None
    confirm: Confirm = ConfirmMode.NONE


class RetentionChange(Struct, forbid_unknown_fields=True):
    retention_days: Retention


class Confirmation(Struct, forbid_unknown_fields=True):
    """Values to confirm: `values`, or `first` (and `last`, default first), in `period`."""

    values: Annotated[list[Number], Meta(min_length=1, max_length=MAX_VALUES)] | UnsetType = UNSET
    first: Number | UnsetType = UNSET
    last: Annotated[Number, Meta(description="default: first")] | UnsetType = UNSET
    period: Period | UnsetType = UNSET


class VoidBody(Confirmation, kw_only=True, forbid_unknown_fields=True):
    """Values to void, for a `reason`: `values`, or `first` (and `last`), in `period`."""

    reason: Reason


class Head(Struct):
    row: Annotated[int, Meta(ge=1, le=MAX_VALUE)]
    hash: Annotated[str, Meta(pattern=HASH)]
    at: str | UnsetType = UNSET


class AnchoredHead(Struct, kw_only=True):
    """One head of an anchor sink's records: which chain, and which record said so."""

    chain: Annotated[str, Meta(min_length=1, max_length=512)]
    row: Annotated[int, Meta(ge=1, le=MAX_VALUE)]
    hash: Annotated[str, Meta(pattern=HASH)]
    at: str | UnsetType = UNSET
    by: str | UnsetType = UNSET


class AnchoredStart(Struct):
    """A prune a batcher anchored: retention removed a chain's rows up to `after_id`, whose
    hash was `after_hash`."""

    after_id: Annotated[int, Meta(ge=0, le=MAX_VALUE)]
    after_hash: Annotated[str, Meta(pattern=HASH)]


class Heads(Struct):
    """{chain: head}, one per chain (`audit heads --json`); or a list of every head kept, with
    each chain's newest anchored prune (`starts`)."""

    heads: (
        Annotated[dict[str, Head], Meta(min_length=1)]
        | Annotated[list[AnchoredHead], Meta(min_length=1)]
    )
    starts: dict[str, AnchoredStart] | UnsetType = UNSET


class NewKey(Struct):
    name: Annotated[str, Meta(pattern=KEY_NAME.pattern)]
    scopes: Annotated[list[Scope], Meta(min_length=1, max_length=MAX_SCOPES)]


class NextQuery(Struct):
    """The query of POST /counters/{name}/next."""

    count: Annotated[int, Meta(ge=1, le=MAX_COUNT)] = 1


class PageQuery(Struct):
    """The query of GET /counters."""

    limit: Annotated[int, Meta(ge=1, le=MAX_PAGE)] = 100
    after: Annotated[Name, Meta(description="the `next` of the last page")] | UnsetType = UNSET


# What the service answers.


class CounterBody(Struct):
    """A counter's settings; from GET, also the current `period` and the last `value` handed
    out in it (null before the first)"""

    name: str
    start: int
    template: str
    reset: Reset
    timezone: str
    retention_days: int | None
    confirm: Confirm
    value: int | UnsetType | None = UNSET
    period: str | UnsetType = UNSET


class CounterPage(Struct):
    counters: list[CounterBody]
    next: Annotated[str | None, Meta(description="`after` for the next page")]


class ValueBody(Struct):
    """One value (count=1)"""

    counter: str
    value: Number
    formatted: str


class FormattedValue(Struct):
    value: Number
    formatted: str


class ValuesBody(Struct):
    """`count` consecutive values (count > 1)"""

    counter: str
    first: Number
    last: Number
    values: list[FormattedValue]


class Range(Struct):
    first: Number
    last: Number


class Voided(Struct):
    counter: str
    period: str
    voided: list[Range]
    reason: str


class Confirmed(Struct):
    counter: str
    period: str
    confirmed: list[Range]


class Report(Struct):
    """The completeness report of a period (docs/invoices.md)"""

    counter: str
    period: str
    issued: int
    delivered: int
    voided: dict[str, int]
    voids: list[dict[str, Any]]
    unsure: int
    unsure_runs: list[dict[str, Any]]
    unexplained_gaps: int
    gaps: list[list[int]]
    issued_twice: list[list[int]]
    rising: bool
    start: int | UnsetType = UNSET
    first: int | UnsetType | None = UNSET
    last: int | UnsetType | None = UNSET


class AuditExport(Struct):
    counter: str
    period: str
    rows: list[dict[str, Any]]


class Verification(Struct):
    ok: bool


class KeyBody(Struct):
    id: str
    name: str
    scopes: list[str]
    created: str
    last_used: str | None
    revoked: str | None
    secret: Annotated[str, Meta(description="only when the key is created")] | UnsetType = UNSET


class KeyList(Struct):
    keys: list[KeyBody]


class HealthBody(Struct):
    status: Literal["ok", "degraded"]


class ProblemBody(Struct):
    """An RFC 9457 problem; `type` is stable (see docs/problems.md)"""

    type: str
    title: str
    status: int
    detail: str | UnsetType = UNSET


COMPONENTS: tuple[type[Struct], ...] = (
    NewCounter,
    CounterBody,
    CounterPage,
    RetentionChange,
    ValueBody,
    FormattedValue,
    ValuesBody,
    VoidBody,
    Confirmation,
    Range,
    Voided,
    Confirmed,
    Report,
    AuditExport,
    Verification,
    Heads,
    NewKey,
    KeyBody,
    KeyList,
    HealthBody,
    ProblemBody,
)
"""The bodies the OpenAPI document names (the queries become its parameters)."""


SUFFIX = "Body"
"""A model whose name ends so is the schema named without it (`CounterBody` is `Counter`): the
model's class name stays apart from the domain's (infra.counters.Counter, infra.keys.Key, ...),
and the document keeps the API's names."""


def component(model: type[Struct]) -> str:
    """The name of a model's schema in the OpenAPI document."""
    return model.__name__.removesuffix(SUFFIX)


def schemas() -> dict[str, Any]:
    """`components/schemas`: each body's JSON Schema, derived from its model."""
    _, found = msgspec.json.schema_components(
        COMPONENTS, ref_template="#/components/schemas/{name}"
    )
    found = {name.removesuffix(SUFFIX): _named(schema, name) for name, schema in found.items()}
    for name in ("Void", "Confirmation"):
        found[name] = marking(found[name])
    described: dict[str, Any] = _described(found)
    return described


def _named(schema: Any, model: str = "") -> Any:
    """`schema` (of `model`) with its title and each `$ref` named as the schema (`SUFFIX`)."""
    if isinstance(schema, list):
        return [_named(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: value.removesuffix(SUFFIX)
        if key == "$ref" or (key == "title" and value == model)
        else _named(value)
        for key, value in schema.items()
    }


def _described(schema: Any) -> Any:
    """`schema` with each description on one line (a docstring's lines are wrapped)."""
    if isinstance(schema, list):
        return [_described(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {name: _described(item) for name, item in schema.items()}
    if isinstance(out.get("description"), str):
        out["description"] = " ".join(out["description"].split())
    return out


def marking(schema: dict[str, Any]) -> dict[str, Any]:
    """A void's or a confirmation's schema as its two shapes (functions/ledger.py
    `void_ranges` takes one or the other): `values`, or `first` with an optional `last`."""
    properties = schema["properties"]
    required = schema.get("required", [])
    shapes = []
    for needs, leaves in (("values", ("first", "last")), ("first", ("values",))):
        shapes.append(
            {
                "type": "object",
                "required": [needs, *required],
                "additionalProperties": False,
                "properties": {k: v for k, v in properties.items() if k not in leaves},
            }
        )
    described = {"description": schema["description"]} if "description" in schema else {}
    return {**described, "oneOf": shapes}


class PeriodQuery(Struct):
    """The query of a report."""

    period: Period | UnsetType = UNSET


class AuditQuery(Struct):
    """The query of an audit export."""

    period: Period | UnsetType = UNSET
    format: Literal["json", "csv"] = "json"


class VerifyQuery(Struct):
    """The query of a verification."""

    counter: (
        Annotated[Name, Meta(description="only the chains holding this counter's rows")] | UnsetType
    ) = UNSET
