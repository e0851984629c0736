"""Offset continuity: no input record is skipped, and none processed twice, within an assignment.

Around a rebalance Faust can drop records its consumer already fetched: a batch fetched while
the flow is stopped is discarded with a seek back to the committed offsets, but aiokafka seeks
only partitions that have a committed offset above 0 (`faust_patches` item 3), and records left
in a batch when the generation changes are discarded without any seek. The consumer's position
has then moved past records no agent saw; they would be read again only after a restart, and
their offsets would never be committed. The input topics are written without transactions and
never compacted (docs/contract.md), so their offsets are consecutive: a record whose offset is
past the next one expected is a gap, and one before it a record delivered twice.

`Continuity` judges each record's offset against the next expected for its partition: the
offset after the last one processed, or at the first record of an assignment the group's
committed offset (the partition's first offset when the group has none). A gap asks the worker
to seek back to the expected offset and to drop records until that one arrives (asked again, at
most `max_seeks` times, if it does not within `reseek_s`: a seek lost in a rebalance); a record
delivered twice is dropped (it was processed, and its ack is pending or done). Pure: the worker
passes the times in.

The commit keeps the same rule (`commit_point`, `faust_patches` item 6): the worker acks a
record whose samples all went to other workers when they are sent, and one that changed windows
here only once those are on the changelog, so acks come out of offset order. An offset is
committed only when every record before it was acked; a SIGKILL then loses no record's windows.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable
from dataclasses import dataclass
from enum import Enum

#: how long a seek back may take before it is asked again (a fetch round trip is milliseconds)
RESEEK_S = 5.0
#: seeks back for one gap before the records that never arrive are given up on, counted
MAX_SEEKS = 3


class Verdict(Enum):
    PROCESS = "process"
    #: already processed in this assignment
    DUPLICATE = "duplicate"
    #: records before it were skipped: seek back to `Continuity.expected(tp)`, drop this one
    GAP = "gap"
    #: a seek back is under way: drop it, it will be delivered again
    REWINDING = "rewinding"


@dataclass
class _Rewind:
    offset: int
    since: float
    seeks: int


class Continuity:
    """The next offset expected per partition, and the seeks back under way."""

    def __init__(self, reseek_s: float = RESEEK_S, max_seeks: int = MAX_SEEKS) -> None:
        self.reseek_s = reseek_s
        self.max_seeks = max_seeks
        self._next: dict[Hashable, int] = {}
        self._rewinds: dict[Hashable, _Rewind] = {}
        #: records given up on after `max_seeks` seeks, in total
        self.given_up = 0

    def expected(self, tp: Hashable) -> int | None:
        return self._next.get(tp)

    def judge(self, tp: Hashable, offset: int, committed: int | None, now: float) -> Verdict:
        """The verdict on the record at `offset`; `committed` is the group's committed offset
        for `tp` as the consumer read it at assignment, or the partition's first offset when
        there is none (None if that is unknown too: any first record is taken)."""
        expected = self._next.get(tp, committed)
        if expected is None or offset == expected:
            self._rewinds.pop(tp, None)
            self._next[tp] = offset + 1
            return Verdict.PROCESS
        if offset < expected:
            return Verdict.DUPLICATE
        rewind = self._rewinds.get(tp)
        if rewind is None or rewind.offset != expected:
            self._next[tp] = expected
            self._rewinds[tp] = _Rewind(expected, now, 1)
            return Verdict.GAP
        if now - rewind.since < self.reseek_s:
            return Verdict.REWINDING
        if rewind.seeks < self.max_seeks:
            rewind.since, rewind.seeks = now, rewind.seeks + 1
            return Verdict.GAP
        self.given_up += offset - expected
        del self._rewinds[tp]
        self._next[tp] = offset + 1
        return Verdict.PROCESS

    def due(self, now: float) -> list[tuple[Hashable, int]]:
        """The seeks back to ask again: under way for `reseek_s` with nothing delivered since
        (a judged record asks by itself), at most `max_seeks` in all; past that, the next
        record delivered settles it (`judge`)."""
        out = []
        for tp, rewind in self._rewinds.items():
            if now - rewind.since >= self.reseek_s and rewind.seeks < self.max_seeks:
                rewind.since, rewind.seeks = now, rewind.seeks + 1
                out.append((tp, rewind.offset))
        return out

    def forget(self, tp: Hashable) -> None:
        """A partition revoked: its next owner starts from the committed offset."""
        self._next.pop(tp, None)
        self._rewinds.pop(tp, None)


def commit_point(acked: list[int], committed: int | None, pending: int | None) -> int | None:
    """The offset to commit for one partition, or None for nothing new.

    One past the run of consecutive acked offsets that begins at `committed` (at the lowest
    acked offset when the group has none: Faust reads a committed 0 as none too), and never
    past `pending`, the lowest offset delivered and not acked yet. Offsets are consecutive in
    the topics this applies to (above), so an offset missing from the run is a record still in
    flight, never one a compaction removed. `acked` is sorted.
    """
    if not acked:
        return None
    start = acked[0] if committed is None else committed
    i = bisect_left(acked, start)
    if i == len(acked) or acked[i] != start:
        return None
    end = start + 1
    for offset in acked[i + 1:]:
        if offset != end:
            break
        end += 1
    if pending is not None and pending < end:
        end = pending
    return end if end > start else None
