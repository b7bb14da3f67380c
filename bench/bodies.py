"""The typed-bodies library, chosen by measurement on /next's path: decoding and checking its
query (`?count=N`), encoding its answer, and decoding and checking a void's body, by hand (as
functions/ did before the models), with msgspec and with pydantic, in one run.

    python -m bench.bodies --rounds 5

Each case runs the same input through each way, round after round, alternating; the table
shows the best round's time per call and each library's ratio to the hand-written way. The
import time of each library (a fresh interpreter, best of three) is printed too: a Lambda
container pays it at every cold start.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import timeit
from collections.abc import Callable
from typing import Annotated, Any

import msgspec
import orjson
import pydantic

MAX_COUNT = 1000
MAX_VALUE = 2**63 - 1
REASON = r"^[^\x00-\x1f\x7f]{1,200}$"


class NextQueryStruct(msgspec.Struct, forbid_unknown_fields=True):
    count: Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)] = 1


class NextQueryModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    count: Annotated[int, pydantic.Field(ge=1, le=MAX_COUNT)] = 1


class ValueStruct(msgspec.Struct):
    counter: str
    value: int
    formatted: str


class ValueModel(pydantic.BaseModel):
    counter: str
    value: int
    formatted: str


Number = Annotated[int, msgspec.Meta(ge=0, le=MAX_VALUE)]
PydanticNumber = Annotated[int, pydantic.Field(ge=0, le=MAX_VALUE, strict=True)]


class VoidStruct(msgspec.Struct, forbid_unknown_fields=True):
    reason: Annotated[str, msgspec.Meta(pattern=REASON)]
    values: Annotated[list[Number], msgspec.Meta(min_length=1, max_length=500)] | None = None
    first: Number | None = None
    last: Number | None = None
    period: str | None = None


class VoidModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    reason: Annotated[str, pydantic.Field(pattern=REASON)]
    values: Annotated[list[PydanticNumber], pydantic.Field(min_length=1, max_length=500)] | None = (
        None
    )
    first: PydanticNumber | None = None
    last: PydanticNumber | None = None
    period: str | None = None


def count_by_hand(raw: str | None) -> int:
    """functions/validation.py's `count` as it was."""
    if raw is None:
        return 1
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
        raise ValueError("count")
    value = int(raw)
    if not 1 <= value <= MAX_COUNT:
        raise ValueError("count")
    return value


def void_by_hand(body: bytes) -> dict[str, Any]:
    """functions/ledger.py's checks of a void's body as they were (strict JSON, then each
    field)."""
    orjson.loads(body)
    data = json.loads(body)
    if not isinstance(data, dict) or set(data) - {"values", "first", "last", "period", "reason"}:
        raise ValueError("body")
    reason = data.get("reason")
    if not isinstance(reason, str) or not 1 <= len(reason) <= 200:
        raise ValueError("reason")
    values = data.get("values")
    if not isinstance(values, list) or not 1 <= len(values) <= 500:
        raise ValueError("values")
    if not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_VALUE for v in values
    ):
        raise ValueError("values")
    return data


QUERY = {"count": "5"}
ANSWER = {"counter": "hot", "value": 1234567, "formatted": "INV-2026-1234567"}
VOID = orjson.dumps({"values": [3, 4, 5, 9], "reason": "invoice cancelled: order 17"})
query_type = pydantic.TypeAdapter(NextQueryModel)

CASES: dict[str, dict[str, Callable[[], object]]] = {
    "/next query ?count=5": {
        "by hand": lambda: count_by_hand(QUERY.get("count")),
        "msgspec": lambda: msgspec.convert(QUERY, NextQueryStruct, strict=False).count,
        "pydantic": lambda: NextQueryModel.model_validate(QUERY).count,
    },
    "/next answer, encoded": {
        "by hand": lambda: orjson.dumps(ANSWER),
        "msgspec": lambda: msgspec.json.encode(ValueStruct("hot", 1234567, "INV-2026-1234567")),
        "pydantic": lambda: ValueModel(
            counter="hot", value=1234567, formatted="INV-2026-1234567"
        ).model_dump_json(),
    },
    "void body, decoded and checked": {
        "by hand": lambda: void_by_hand(VOID),
        "msgspec": lambda: msgspec.json.decode(VOID, type=VoidStruct),
        "pydantic": lambda: VoidModel.model_validate_json(VOID),
    },
}


def imported(module: str) -> float:
    """Seconds a fresh interpreter that has loaded what the edge loads anyway (starlette,
    orjson) takes to import `module` (best of three): its own share of a cold start."""
    code = (
        "import starlette.applications, orjson, time; t = time.perf_counter(); "
        f"import {module}; print(time.perf_counter() - t)"
    )
    runs = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
        for _ in range(3)
    ]
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=20_000, help="calls per round and way")
    args = parser.parse_args()
    print(f"{'case':32} {'way':9} {'µs/call':>8} {'by hand=1':>10}")
    for case, ways in CASES.items():
        best = {way: float("inf") for way in ways}
        for _ in range(args.rounds):
            for way, call in ways.items():
                best[way] = min(best[way], timeit.timeit(call, number=args.number) / args.number)
        for way, seconds in best.items():
            print(f"{case:32} {way:9} {seconds * 1e6:8.2f} {seconds / best['by hand']:10.2f}")
    for module in ("msgspec.json", "pydantic"):
        print(f"import {module} (after starlette): {imported(module) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
