"""How long a worker's input waits to be taken, per partition: the lag gauges.

A worker knows how many records of a partition it has not taken (the last fetch's high
watermark less the next offset it takes) but not when they arrived: they are not fetched yet.
The oldest arrived after the last record taken, and after the last reading that found the
partition caught up, so its wait is at most the time since the later of the two. Bounding it by
the last record's append time alone reads a sparse partition's whole idle gap as lag: a record
taken at once after 7 s of quiet would show 7 s. Records taken since the last reading add what
they waited (taken - appended), so a wait that ended between two readings is still seen.

The reading that found the partition caught up may have known a high watermark as old as one
fetch's long-poll; a record appended in that time is seen waiting up to that much less than it
did, and its real wait is counted once it is taken.
"""

from __future__ import annotations

from collections.abc import Hashable


class LagMeter:
    """Per partition: the longest wait of the records taken since the last reading, the append
    time of the last one taken, and when a reading last found nothing waiting (wall-clock ms)."""

    __slots__ = ("waited", "last_appended", "caught_up")

    def __init__(self) -> None:
        self.waited: dict[Hashable, float] = {}
        self.last_appended: dict[Hashable, float] = {}
        self.caught_up: dict[Hashable, float] = {}

    def taken(self, partition: Hashable, appended_ms: float, now_ms: float) -> None:
        """A record appended at `appended_ms` was taken at `now_ms`."""
        wait = now_ms - appended_ms
        if wait > self.waited.get(partition, 0.0):
            self.waited[partition] = wait
        self.last_appended[partition] = appended_ms

    def reading(self, partition: Hashable, behind: int, now_ms: float) -> float:
        """The partition's lag in seconds now, `behind` records not taken: how long the oldest
        of them has waited at most, or the longest a record taken since the last reading
        waited, whichever is larger; then a new reading period starts."""
        wait = self.waited.pop(partition, 0.0)
        if behind:
            since = max(self.last_appended.get(partition, now_ms),
                        self.caught_up.get(partition, 0.0))
            wait = max(wait, now_ms - since)
        else:
            self.caught_up[partition] = now_ms
        return max(0.0, wait) / 1000.0

    def forget(self, partition: Hashable) -> None:
        """The partition went to another worker."""
        self.waited.pop(partition, None)
        self.last_appended.pop(partition, None)
        self.caught_up.pop(partition, None)
