"""What a run's "requests per transaction" means, and how much room Postgres had left.

A frame closes as soon as the previous frame's transaction is done (group commit, FRAME_MIN_MS
after it): so while requests arrive slower than frames commit, each frame holds the one request
that came, and "req/txn 1.00" is the design working, not failing — nobody waits for a frame to
fill. Frames grow, one transaction for all they hold, once requests come faster than commits
finish. The headroom is read from the same run: the seconds the batcher spent applying frames
(`numerator_frame_commit_seconds`, each frame's whole transaction, retries included) against the
run's seconds. That share is how busy the store was with frames; one over it is how many times
this run's transactions a second the store could have committed back to back, before requests
would have had to share frames."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ONE_A_FRAME = 1.5
"""Requests per transaction below which frames held about one request each."""


@dataclass(frozen=True)
class Headroom:
    """One run's frames: requests a transaction, and the store's busy share."""

    requests_per_txn: float
    requests_per_s: float
    transactions_per_s: float
    commit_ms: float | None
    """A frame's transaction, the mean; None in a record made before it was scraped."""
    batchers: int = 1
    """On the AWS path, batchers that each commit their own frames (their shares summed)."""

    @property
    def busy_share(self) -> float | None:
        """Of the run's seconds, the share a batcher spent applying frames (the mean)."""
        if self.commit_ms is None:
            return None
        return self.transactions_per_s * self.commit_ms / 1000 / self.batchers

    @property
    def commits_possible_per_s(self) -> float | None:
        """Frames the store could commit a second, back to back, at this run's commit time."""
        return self.batchers * 1000 / self.commit_ms if self.commit_ms else None

    @property
    def times(self) -> float | None:
        """Headroom: the commits possible a second over this run's transactions a second."""
        possible = self.commits_possible_per_s
        return possible / self.transactions_per_s if possible and self.transactions_per_s else None

    def meaning(self) -> str:
        arrive = f"one every {1000 / self.requests_per_s:.1f} ms" if self.requests_per_s else ""
        commit = (
            f" against a frame's transaction of {self.commit_ms:.2f} ms" if self.commit_ms else ""
        )
        if self.requests_per_txn < ONE_A_FRAME:
            return (
                f"requests / txn {self.requests_per_txn:.2f}: each frame held about one request. "
                "A frame closes as soon as the previous one has committed (group commit), so "
                f"while requests arrive slower than frames commit ({arrive}{commit}) each gets a "
                "transaction of its own at once and none waits for a frame to fill; frames hold "
                "many requests, one transaction for all, once requests come faster than the "
                "store commits."
            )
        return (
            f"requests / txn {self.requests_per_txn:.2f}: requests came faster than frames "
            f"committed ({arrive}{commit}), and each transaction took all that had come."
        )

    def room(self) -> str:
        busy, possible, times = self.busy_share, self.commits_possible_per_s, self.times
        if busy is None or possible is None or times is None:
            return "headroom: not measured (no numerator_frame_commit_seconds in this record)"
        who = f"each of {self.batchers} batchers" if self.batchers > 1 else "Postgres"
        return (
            f"headroom: frames kept {who} busy {busy:.0%} of the run "
            f"({self.transactions_per_s:,.0f} transactions a second, {self.commit_ms:.2f} ms "
            f"each): back to back it commits about {possible:,.0f} a second, {times:,.1f} times "
            "this run's"
            + (
                ", before requests share frames; past that, frames grow instead of transactions."
                if self.requests_per_txn < ONE_A_FRAME
                else "."
            )
        )

    def lines(self) -> list[str]:
        return [self.meaning(), self.room()]


def headroom(run: dict[str, Any]) -> Headroom | None:
    """The run's frames, or None where it had none (a baseline, no scrape, no requests)."""
    if not str(run["summary"].get("target", "")).startswith("numerator"):
        return None
    totals = run["service"]["totals"]
    transactions, requests = totals.get("transactions") or 0, totals.get("requests") or 0
    seconds = float(run["summary"].get("duration_s") or 0)
    if not transactions or not requests or seconds <= 0:
        return None
    commit_s = totals.get("commit_s")
    return Headroom(
        requests_per_txn=requests / transactions,
        requests_per_s=requests / seconds,
        transactions_per_s=transactions / seconds,
        commit_ms=commit_s * 1000 / transactions if commit_s else None,
        batchers=int(run.get("settings", {}).get("batchers") or 1),
    )
