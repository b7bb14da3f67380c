"""A Lambda container in a test: the real handler (functions/handler.py) in a thread and event
loop of its own, fed API Gateway's event files (events/), with the function's environment as
template.yaml sets it; and a batcher in a thread beside it."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from functions.handler import build
from infra.settings import Settings
from numerator.lambdaedge import Context
from numerator.stack import BatcherStack

EVENTS = Path(__file__).parents[1] / "events"


def event(file: str, name: str) -> dict[str, Any]:
    text = (EVENTS / file).read_text()
    data: dict[str, Any] = json.loads(text.replace("events-demo", name))
    if data.get("isBase64Encoded") and "body" in data:  # the name inside an encoded body too
        body = base64.b64decode(data["body"]).decode().replace("events-demo", name)
        data["body"] = base64.b64encode(body.encode()).decode()
    return data


def environment(settings: Settings) -> dict[str, str]:
    """The function's environment as template.yaml sets it by default: API Gateway's IAM
    authorizer checks callers, so the edge does not (tests/integration/test_keys.py has the
    Lambda path with numerator's own keys)."""
    env = {k: v for k, v in settings.to_env().items() if v}
    return {**env, "AUTH": "none", "AUTHORIZER": "iam"}


class Container:
    """One Lambda container: its own thread and event loop, the handler built once."""

    def __init__(self, env: dict[str, str]) -> None:
        self.thread = ThreadPoolExecutor(1)
        self.handler = self.thread.submit(build, env).result()

    def __call__(self, request: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        answer: dict[str, Any] = self.thread.submit(
            self.handler, request, Context(timeout)
        ).result()
        return answer

    def close(self) -> None:
        """What Lambda never does (it freezes the container): close the pool and the loop, so
        that the test leaves nothing running."""
        self.thread.submit(retire, self.handler).result()
        self.thread.shutdown()


def retire(handler: Any) -> None:
    loop = asyncio.get_event_loop()
    loop.run_until_complete(handler.app.edge.store.close())
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


def body(answer: dict[str, Any]) -> Any:
    raw = answer["body"]
    return json.loads(base64.b64decode(raw) if answer.get("isBase64Encoded") else raw)


@contextmanager
def batcher_on(settings: Settings) -> Iterator[Settings]:
    """A batcher on these settings' stream, table and Postgres, in a thread of its own."""
    ready, done = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        async def main() -> None:
            async with BatcherStack(settings):
                ready.set()
                await asyncio.to_thread(done.wait)

        try:
            asyncio.run(main())
        except BaseException as exc:
            failed.append(exc)
            ready.set()

    thread = threading.Thread(target=run)
    thread.start()
    assert ready.wait(30) and not failed, failed
    try:
        yield settings
    finally:
        done.set()
        thread.join(30)
