"""Rewinds a batcher's frames found: a counter whose Postgres row is below values already handed
out (Postgres forgot commits: a failover to a standby that lacked them). The frame refused its
records (batcher/handout.py `refuse`); here it is said once and recorded in Postgres, where
every batcher's floor reads it and `numerator counters mend` finds it (docs/runbook.md)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from infra.errors import NumeratorError
from infra.ports import Frames

log = logging.getLogger("numerator.batcher")


class Rewinds:
    def __init__(self, frames: Frames) -> None:
        self.frames = frames
        self.said: dict[tuple[str, str], int] = {}  # the periods found rewound, and said so

    async def found(self, rewound: Mapping[tuple[str, str], int]) -> None:
        """Say, once per period and floor, that a frame found its counter below the floor
        (`rewound`: the floor by (counter, period)), and record it: a batcher started later (its
        memory of what it handed out gone) refuses it too."""
        new = {pair: held for pair, held in rewound.items() if self.said.get(pair) != held}
        if not new:
            return
        for (name, period), held in sorted(new.items()):
            log.error(
                "REWOUND: counter %r period %r is below %d, a value already handed out (Postgres "
                "forgot commits: a failover to a standby that lacked them?); refusing it until an "
                "operator runs `numerator counters mend %s` (docs/runbook.md)",
                name, period, held, name,
            )  # fmt: skip
        try:
            await self.frames.rewound(new)
        except NumeratorError as exc:  # said again with the next frame refused
            log.warning("could not record the rewind in Postgres: %s", exc)
            return
        self.said.update(new)
