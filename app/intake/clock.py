"""The stream clock: the skew check every driver applies to each input stream's events.

Part of the intake (`app.intake`): pure, like the engine, and run once per sample, so compiled
with it (`app/engine_build.py`).
"""

from __future__ import annotations

#: How many recent event timestamps a `StreamClock` takes its reference (their median) from.
CLOCK_SPAN = 5
#: How many of those must lie within `max_skew_ms` of each other before the clock judges.
MAJORITY = CLOCK_SPAN // 2 + 1
#: Timestamps a clock holds at most before it judges them with what is there.
HOLD_MAX = 1000
#: `near` when a stream has no time of its own to offer (an archive without arrival times):
#: of groups as large, the latest one.
LATEST = 2**62

#: A batch's verdicts: how many of the stamps waiting are judged now (the held ones first,
#: oldest first, then the batch's), and (position among those, reason) of each refused one.
Verdicts = tuple[int, list[tuple[int, str]]]


class StreamClock:
    """Rejects timestamps absurdly far from the stream's time, judging none without agreement.

    Agreement: MAJORITY of the stream's last CLOCK_SPAN timestamps (accepted or not) lie within
    `max_skew_ms` of each other. Then the reference is their median (the upper one of two),
    which lies among those that agree, so no minority of outliers can move it. Without
    agreement (a stream's first events, a burst of outliers that disagree among themselves)
    the clock judges nothing: it holds each event until the last CLOCK_SPAN agree again and
    then judges every held one, in order, against that median. A stream that really jumps is
    followed once a majority agrees on its new time.

    A hold ends at the latest at HOLD_MAX held events, or when the driver ends it (`settle`:
    the input ended, or the stream's records bound the hold, `app.intake.stream`): the held
    ones are then judged against the median of the largest group of timestamps within
    `max_skew_ms` of each other among them and the CLOCK_SPAN before them; of groups as large,
    the one whose median is nearest `near`, the arrival time of the latest held event
    (LATEST: the latest group), so a lone junk `ts` does not outvote a lone good one.

    Restarts: the state between holds is the last timestamps only, and a live worker acks no
    record its clock holds, so its group's committed offset is never past a hold's first
    record. A worker that takes a partition over therefore starts where no hold is open and
    rebuilds the state exactly from the records before its first one (`seed`); where a hold
    ends depends on the records alone (`app.intake.stream`), so it judges every event as an
    uninterrupted worker did, and replay, live and the audit judge the same events the same
    way when they see them in the same order. One clock per input stream (the replay file, or
    one source partition live).
    """

    __slots__ = ("time", "max_skew_ms", "recent", "held", "before")

    def __init__(self, max_skew_ms: int = 86_400_000) -> None:
        #: the largest accepted ts, -1 before any
        self.time = -1
        self.max_skew_ms = max_skew_ms
        self.recent: list[int] = []
        #: the timestamps not judged yet, oldest first
        self.held: list[int] = []
        #: `recent` as it was when the open hold began
        self.before: list[int] = []

    def agreed(self) -> bool:
        """Do MAJORITY of the recent timestamps lie within `max_skew_ms` of each other?"""
        ordered = sorted(self.recent)
        skew = self.max_skew_ms
        for i in range(len(ordered) - MAJORITY + 1):
            if ordered[i + MAJORITY - 1] - ordered[i] <= skew:
                return True
        return False

    def reference(self) -> int:
        """The median of the recent timestamps (-1 before any): the stream time events are
        judged against once they agree."""
        recent = self.recent
        if not recent:
            return -1
        ordered = sorted(recent)
        return ordered[len(ordered) // 2]

    def check_all(self, stamps: list[int], near: int = LATEST) -> Verdicts:
        """Take the next `stamps` of the stream, in order; return the verdicts this decides.

        Positions count from the oldest stamp held before the call (0 when none was held, so
        then they are indices into `stamps`). Every stamp joins the recent ones, judged or not.
        `near`: the stamps' arrival time, should HOLD_MAX end a hold (see the class doc).

        When nothing is held, at least MAJORITY stamps are known with these, and every stamp and
        every recent one lie within `max_skew_ms` of each other, every stamp is judged at once
        against a median of those (the first few, of a stream's start, once MAJORITY are in)
        and none is refused: the state after is known without checking one by one, the
        batch's last CLOCK_SPAN stamps (with the recent ones before them) and its largest.
        """
        if not stamps:
            return 0, []
        recent = self.recent
        if not self.held and len(recent) + len(stamps) >= MAJORITY:
            lo, hi = min(stamps), max(stamps)
            if recent:
                lo, hi = min(lo, min(recent)), max(hi, max(recent))
            if hi - lo <= self.max_skew_ms:
                tail = recent + stamps[-CLOCK_SPAN:] if len(stamps) < CLOCK_SPAN else stamps[-CLOCK_SPAN:]
                self.recent = tail[-CLOCK_SPAN:]
                top = max(stamps)
                if top > self.time:
                    self.time = top
                return len(stamps), []
        refused: list[tuple[int, str]] = []
        start = len(self.held)
        decided = 0
        for j in range(len(stamps)):
            if self._take(stamps[j], start + j, near, refused):
                decided = start + j + 1
        return decided, refused

    def settle(self, near: int = LATEST) -> Verdicts:
        """Judge the held stamps with what is there (positions as in `check_all`; `near`: the
        arrival time of the latest held one)."""
        refused: list[tuple[int, str]] = []
        held = len(self.held)
        if held:
            self._release(self._fallback(near), 0, refused)
        return held, refused

    def seed(self, timestamps: list[int]) -> None:
        """Start from a stream's earlier event timestamps (oldest first), every one judged:
        the state its clock had after them, as far as later checks can tell."""
        self.recent = list(timestamps[-CLOCK_SPAN:])
        self.held = []
        self.before = []

    def _take(self, ts: int, position: int, near: int, refused: list[tuple[int, str]]) -> bool:
        """One stamp at `position`; True if it decided the stamps up to it."""
        held = self.held
        if not held and self.agreed():
            reason = self._judge(ts, self.reference())
            self._push(ts)
            if reason is not None:
                refused.append((position, reason))
            return True
        if not held:
            self.before = list(self.recent)
        self._push(ts)
        held.append(ts)
        first = position + 1 - len(held)
        if self.agreed():
            self._release(self.reference(), first, refused)
            return True
        if len(held) >= HOLD_MAX:
            self._release(self._fallback(near), first, refused)
            return True
        return False

    def _push(self, ts: int) -> None:
        recent = self.recent
        recent.append(ts)
        if len(recent) > CLOCK_SPAN:
            del recent[0]

    def _judge(self, ts: int, reference: int) -> str | None:
        if abs(ts - reference) > self.max_skew_ms:
            return f"ts {ts} is more than {self.max_skew_ms} ms from the stream time {reference}"
        if ts > self.time:
            self.time = ts
        return None

    def _release(self, reference: int, first: int, refused: list[tuple[int, str]]) -> None:
        """Judge every held stamp against `reference`; the first is at position `first`."""
        held = self.held
        for k in range(len(held)):
            reason = self._judge(held[k], reference)
            if reason is not None:
                refused.append((first + k, reason))
        self.held = []
        self.before = []

    def _fallback(self, near: int) -> int:
        """The median of the largest group within `max_skew_ms` of each other among the held
        stamps and those before the hold (of groups as large, the one whose median is nearest
        `near`, then the later one)."""
        ordered = sorted(self.before + self.held)
        skew = self.max_skew_ms
        best, best_n, best_d = 0, 0, 0
        hi = 0
        for lo in range(len(ordered)):
            if hi < lo:
                hi = lo
            while hi + 1 < len(ordered) and ordered[hi + 1] - ordered[lo] <= skew:
                hi += 1
            n = hi - lo + 1
            median = ordered[lo + n // 2]
            d = abs(median - near)
            if n > best_n or (n == best_n and d <= best_d):
                best, best_n, best_d = median, n, d
        return best
