"""Faults for the crash tests: not settings, so never in docs/settings.md. Read from the
environment once, at the program's edge, by whoever builds the batcher and its store; every
switch is off (0) unless a test sets it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Faults:
    pause_in_frame_s: float = 0.0
    """NUMERATOR_PAUSE_IN_FRAME_S: the first frame's transaction waits this long once its
    counter rows are locked, and says so, so that a test can freeze the batcher (SIGSTOP)
    there."""
    pause_before_publish_s: float = 0.0
    """NUMERATOR_PAUSE_BEFORE_PUBLISH_S: every frame waits this long between its commit and its
    publish, and says so, so that a test can SIGKILL the batcher at the worst moment."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Faults:
        env = os.environ if env is None else env
        return cls(
            float(env.get("NUMERATOR_PAUSE_IN_FRAME_S") or 0),
            float(env.get("NUMERATOR_PAUSE_BEFORE_PUBLISH_S") or 0),
        )
