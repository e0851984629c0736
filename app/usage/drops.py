"""`Drops`: usage events a recorder or publisher could not deliver, counted by reason.

The reasons are a fixed set, so they can be metric labels:

- `buffer_full`: recorded while `max_pending` events already waited (the event topics cannot
  be written fast enough, or at all); the event is not kept.
- `too_large`: one event whose record alone would exceed the record size bound (names are
  bounded, `app.usage.names`, so only a bound set far below the default can cause it).
- `send_failed`: the producer refused a record or gave up delivering it; only that record's
  events are lost, never the rest of its flush.
"""

from __future__ import annotations

BUFFER_FULL, TOO_LARGE, SEND_FAILED = "buffer_full", "too_large", "send_failed"
REASONS = (BUFFER_FULL, TOO_LARGE, SEND_FAILED)


class Drops:
    """Events dropped, by reason, and records that failed to send, since the last `take`."""

    __slots__ = ("events", "failed_records")

    def __init__(self) -> None:
        self.events = dict.fromkeys(REASONS, 0)
        self.failed_records = 0

    def add(self, reason: str, events: int) -> None:
        if reason not in self.events:
            raise ValueError(f"not a drop reason: {reason}")
        self.events[reason] += events
        if reason == SEND_FAILED:
            self.failed_records += 1

    def take(self) -> tuple[dict[str, int], int]:
        """(events dropped by reason, records that failed) since the last call; then zero."""
        events, failed = self.events, self.failed_records
        self.events, self.failed_records = dict.fromkeys(REASONS, 0), 0
        return events, failed
