"""A route declared once: `Operation` holds everything the edge knows of one method on one path —
its handler, what a key must allow (or that it is open), and its OpenAPI words and models — and
`Table` is the app's routes, read by the app (functions/app.py), admission (`Table.need`, which
`FastPath` hands to `auth.Guard`), the fast path (`Table.next_counter`) and the OpenAPI document
(functions/openapi.py). The product's table is functions/table.py."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, compile_path
from starlette.types import ASGIApp

from infra.keys import Need

Handler = Callable[[Request], Awaitable[Response]]
Needed = tuple[Need, str] | None
"""What a request needs a key to allow, and the counter it takes values of; None: open."""

READ, ANY = (Need.READ, ""), (Need.ANY, "")


@dataclass(frozen=True)
class Operation:
    """One method on one path: its `handler` (None: served by `FastPath` in front of the router),
    what a key must allow (`need`; None: open to all; `Need.NEXT`: values of the counter the
    path's `{name}` names), its `id` (a generated client's function), `tag` (its module), the
    `answers` that are not problems (status: (description, content)), the problem statuses it
    may answer, and its request `body` and `query` models."""

    method: str
    path: str
    handler: Handler | None
    need: Need | None
    id: str
    tag: str
    summary: str
    answers: Mapping[str, tuple[str, dict[str, Any] | None]]
    problems: tuple[int, ...] = ()
    body: str | None = None
    query: type[msgspec.Struct] | None = None
    headers: tuple[dict[str, Any], ...] = ()

    @property
    def open(self) -> bool:
        return self.need is None

    @property
    def fast(self) -> bool:
        return self.handler is None


class Table:
    """The routes of an app, in the order its OpenAPI document lists their paths."""

    def __init__(self, operations: Iterable[Operation]) -> None:
        self.operations = tuple(operations)
        self.paths: dict[str, dict[str, Operation]] = {}  # path -> method -> operation
        for operation in self.operations:
            methods = self.paths.setdefault(operation.path, {})
            if operation.method in methods:
                raise ValueError(f"{operation.method} {operation.path} is declared twice")
            methods[operation.method] = operation
        self.patterns = [(compile_path(path)[0], path) for path in self.paths]
        fast = [operation for operation in self.operations if operation.fast]
        if len(fast) != 1 or fast[0].need is not Need.NEXT:
            raise ValueError("one operation, taking a counter's values, is served by FastPath")
        self.fast = fast[0]
        if len(self.paths[self.fast.path]) != 1:
            raise ValueError(f"{self.fast.path} has no method besides the one FastPath answers")
        # the hot route's path as text around its one parameter: a prefix and suffix test, not
        # a regular expression, for every request (a counter's name holds no "/")
        prefix, _, suffix = self.fast.path.partition("{name}")
        if not suffix:
            raise ValueError(f"{self.fast.path}: text must follow {{name}} in the fast path")
        self.fast_path = (self.fast.method, prefix, suffix, len(prefix), -len(suffix))

    def routes(self, fast: ASGIApp) -> list[Route]:
        """Starlette's routes: one per path, its methods' handlers behind it (`fast` serves the
        operation FastPath answers, for the app reached without FastPath in front)."""
        made = []
        for path, methods in self.paths.items():
            handlers = {m: fast if o.handler is None else o.handler for m, o in methods.items()}
            made.append(Route(path, by_method(handlers), methods=list(handlers)))
        return made

    def next_counter(self, method: str, path: str) -> str | None:
        """The counter a request to the route FastPath answers takes values of; None for any
        other request."""
        fast, prefix, suffix, start, end = self.fast_path
        if method != fast or not path.startswith(prefix) or not path.endswith(suffix):
            return None
        if len(path) < start - end:  # the prefix and the suffix overlap: "/counters/next"
            return None
        name = path[start:end]
        return None if "/" in name else name

    def need(self, method: str, path: str, counter: str | None) -> Needed:
        """What a request needs a key to allow (`counter`: next_counter's answer for it). A
        method a path does not declare (a 405 after) needs what every operation of the path
        needs, when they agree on open or admin; else, as an unknown path (a 404 after), a key
        that may read for GET and HEAD, and any key for the rest."""
        if counter is not None:
            return Need.NEXT, counter
        found = self.match(path)
        if found is not None:
            methods, params = found
            operation = methods.get("GET" if method == "HEAD" else method)
            if operation is not None:
                return needed(operation, params)
            needs = {o.need for o in methods.values()}
            if needs == {None}:
                return None
            if needs == {Need.ADMIN}:
                return Need.ADMIN, ""
        return READ if method in ("GET", "HEAD") else ANY

    def match(self, path: str) -> tuple[dict[str, Operation], dict[str, str]] | None:
        """The operations of the declared path `path` matches, and its parameters."""
        methods = self.paths.get(path)
        if methods is not None:
            return methods, {}
        for pattern, declared in self.patterns:
            matched = pattern.match(path)
            if matched is not None:
                return self.paths[declared], matched.groupdict()
        return None


def needed(operation: Operation, params: Mapping[str, str]) -> Needed:
    if operation.need is None:
        return None
    return operation.need, params.get("name", "") if operation.need is Need.NEXT else ""


def by_method(handlers: Mapping[str, Any]) -> Any:
    """One endpoint for a path's methods: the handler itself when they share it, else one that
    picks the request's method's (HEAD is GET's)."""
    distinct = {id(handler): handler for handler in handlers.values()}
    if len(distinct) == 1:
        return next(iter(distinct.values()))

    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        handler: Handler = handlers[method]
        return await handler(request)

    return endpoint


PARAMETER = re.compile(r"{(\w+)(?::\w+)?}")


def path_names(path: str) -> list[str]:
    """The names of a path's `{parameters}`, in order."""
    return PARAMETER.findall(path)
