"""One input stream's decoded records in, the same records judged by its clock out, in order.

The stream clock (`app.intake.clock`) holds samples until a majority of the stream's recent
timestamps agree; a record leaves once every sample in it is judged, and never ahead of one
before it, so every driver hands the engine whole records in input order. Each record travels
with a tag of the driver's (its Faust event, its line number, its position).

A hold is bounded by the stream's own data, so every driver, and a worker that reads a
partition back after a restart, ends it at the same record: at HOLD_RECORDS records, or when
a record arrives more than HOLD_MS (of its Kafka timestamps) after the first one held, which
settles the hold before that record is taken. A live partition that goes quiet has no next
record to say so: once the worker has taken all of it and its own clock is past the bound, it
settles the hold (`finish`; `Worker.settle_quiet`), the verdicts the next record would have
settled it with; so held samples reach the aggregate within seconds.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from app.intake.clock import StreamClock, Verdicts
from app.intake.records import Decoded

T = TypeVar("T")

#: Records held at most (those without a sample to judge wait behind the others too): then the
#: clock judges what it holds with what is there.
HOLD_RECORDS = 64
#: A hold's longest span of arrival times (ms) before it is judged with what is there.
HOLD_MS = 5000


class StreamIntake(Generic[T]):
    """The records of one stream (one source partition, or a replay's input) that wait for
    their clock's verdicts, oldest first.

    `offer` returns the records the new one lets go (itself alone, when its stream agrees:
    the common case costs one batch check), `finish` those left when the input ends or the
    stream went quiet (`due`).
    """

    __slots__ = ("clock", "held", "refused", "counts", "judged")

    def __init__(self, clock: StreamClock) -> None:
        self.clock = clock
        self.held: list[tuple[Decoded, T]] = []
        #: per held record, the verdicts it has so far: (k in its stamps, reason)
        self.refused: list[list[tuple[int, str]]] = []
        #: per held record, how many samples the clock judges in it
        self.counts: list[int] = []
        #: samples of the held records judged so far (those of the first records)
        self.judged = 0

    def offer(self, decoded: Decoded, tag: T) -> list[tuple[Decoded, T]]:
        """Take the stream's next record; return those now judged, in input order."""
        stamps = decoded.stamps
        if not self.held:
            if not stamps:
                return [(decoded, tag)]
            verdicts = self.clock.check_all(stamps, decoded.arrival)
            if verdicts[0] == len(stamps):
                decoded.judge(verdicts[1])
                return [(decoded, tag)]
        elif self.due(decoded.arrival):
            return self.finish() + self.offer(decoded, tag)
        else:
            verdicts = self.clock.check_all(stamps, decoded.arrival) if stamps else (0, [])
        self.held.append((decoded, tag))
        self.refused.append([])
        self.counts.append(len(stamps))
        self._apply(verdicts)
        if len(self.held) >= HOLD_RECORDS:
            return self.finish()
        return self._leave(self._ready())

    def due(self, now_ms: int) -> bool:
        """Are records held whose first arrived more than HOLD_MS before `now_ms` (a record's
        arrival, or the time now)?"""
        held = self.held
        return bool(held) and now_ms - held[0][0].arrival > HOLD_MS

    def finish(self) -> list[tuple[Decoded, T]]:
        """Every record still held, judged with what is there: the input ended, or the
        stream went quiet (`due`)."""
        if not self.held:
            return []
        self._apply(self.clock.settle(self.held[-1][0].arrival))
        return self._leave(len(self.held))

    def _apply(self, verdicts: Verdicts) -> None:
        """Record the clock's verdicts on the held records; their positions count from the
        first sample not judged yet."""
        decided, refused = verdicts
        if not decided:
            return
        base = self.judged
        counts = self.counts
        r = 0
        start = 0  # the first sample of record r among the held records' samples
        for position, reason in refused:
            at = base + position
            while at >= start + counts[r]:
                start += counts[r]
                r += 1
            self.refused[r].append((at - start, reason))
        self.judged = base + decided

    def _ready(self) -> int:
        """How many of the first held records have every sample judged."""
        judged = self.judged
        n = 0
        for count in self.counts:
            if count > judged:
                break
            judged -= count
            n += 1
        return n

    def _leave(self, n: int) -> list[tuple[Decoded, T]]:
        """The first `n` held records, with their verdicts."""
        if not n:
            return []
        out = self.held[:n]
        for k in range(n):
            out[k][0].judge(self.refused[k])
            self.judged -= self.counts[k]
        del self.held[:n]
        del self.refused[:n]
        del self.counts[:n]
        return out
