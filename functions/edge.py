"""What the edge needs from the rest of the system, passed in once by whoever wires it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from infra.clock import utc_now
from infra.metrics import Metrics
from infra.ports import Replies, Store, Stream
from infra.settings import Settings


def always() -> bool:
    return True


def nothing() -> None:
    return None


@dataclass
class Edge:
    stream: Stream
    replies: Replies
    store: Store
    settings: Settings
    metrics: Metrics
    clock: Callable[[], datetime] = utc_now
    healthy: Callable[[], bool] = always
    observe: Callable[[], None] = nothing
    """Refresh gauges just before /metrics renders them."""

    @property
    def record_budget(self) -> float:
        """Seconds a record may wait for its frame: a little less than the reply timeout, so that
        a record the batcher cannot apply in time is answered 503 before the client's 504."""
        timeout = self.settings.reply_timeout_s
        return timeout - min(0.5, timeout / 4)
