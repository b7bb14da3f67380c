"""What a batcher's jobs share: the trouble /healthz shows, when to start a dead shard loop again,
and the held replies published since their shard's last frame. One object, each change a method:
the applier, the shard loops, their supervisor and the shares each say what happened, and none
writes another's fields."""

from __future__ import annotations

from collections.abc import Sequence

from infra.backoff import Backoff


class Shared:
    def __init__(self) -> None:
        self._failing = False  # a frame is being retried
        self._unreadable: set[str] = set()  # shards whose last read failed
        self._dead: set[str] = set()  # shards whose loop died and has not worked since
        self._restarts: dict[str, Backoff] = {}  # per shard whose loop died: when to try again
        self._published: dict[str, list[int]] = {}  # per shard: held replies since published

    @property
    def healthy(self) -> bool:
        """Nothing is wrong now: no frame being retried, no shard that cannot be read, no shard
        loop dead. Each trouble clears itself when the thing works again, so a passing outage
        does not leave a container's health check failing for ever."""
        return not (self._failing or self._unreadable or self._dead)

    def trouble(self) -> list[str]:
        """What is wrong now, as /healthz names it: "frames", "read SHARD", "dead shard-SHARD"
        (the shard's loop, named as its task is)."""
        named = [f"read {shard}" for shard in self._unreadable]
        named += [f"dead shard-{shard}" for shard in self._dead]
        return sorted(["frames"] * self._failing + named)

    def frames_failing(self, failing: bool) -> None:
        self._failing = failing

    def readable(self, shard: str, readable: bool) -> None:
        if readable:
            self._unreadable.discard(shard)
        else:
            self._unreadable.add(shard)

    def died(self, shard: str) -> float:
        """The shard's loop died of a bug: shown until it works again; the seconds until it is
        started again (jittered, doubling from 1 s to 30 s while it keeps dying)."""
        self._dead.add(shard)
        return max(self._restarts.setdefault(shard, Backoff(base=1.0, cap=30.0)).next(), 0.1)

    def working(self, shard: str, committed: bool) -> None:
        """The shard's loop works: nothing was waiting for it, or a frame committed (which also
        ends its backoff: a loop that keeps dying waits longer each time)."""
        if shard not in self._restarts:
            return
        self._dead.discard(shard)
        if committed:
            del self._restarts[shard]

    def published(self, shard: str, held: int) -> None:
        """The replies held under `held` were published: to mark so."""
        self._published.setdefault(shard, []).append(held)

    def unmarked(self, shard: str) -> Sequence[int]:
        """The shard's held replies published and not yet marked so (its next frame does)."""
        return self._published.get(shard, ())

    def marked(self, shard: str) -> list[int]:
        """Forget the shard's held replies published (its frame's transaction marked them, or
        the caller marks them now): the ones it returns."""
        return self._published.pop(shard, [])
