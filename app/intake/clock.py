"""The stream clock: the skew check every driver applies to each input stream's events.

Part of the intake (`app.intake`): pure, like the engine, and run once per sample, so compiled
with it (`app/engine_build.py`).
"""

from __future__ import annotations

#: How many recent event timestamps a `StreamClock` takes its reference (their median) from.
CLOCK_SPAN = 5


class StreamClock:
    """Rejects timestamps absurdly far from the stream's time.

    The reference is the median `ts` of the stream's last CLOCK_SPAN events (accepted or
    not; the upper one of two), so no single outlier, nor two, can move it: a stream that
    really jumps is followed once three of five events agree. The state is those timestamps
    only, so a worker that starts in the middle of a partition rebuilds it exactly from the
    records before its first one (`seed`), and replay, live and the audit judge the same
    events the same way when they see them in the same order. One clock per input stream
    (the replay file, or one source partition live). The first event of a stream has no
    reference and is accepted.
    """

    __slots__ = ("time", "max_skew_ms", "recent")

    def __init__(self, max_skew_ms: int = 86_400_000) -> None:
        #: the largest accepted ts (the audit's ordering key), -1 before any
        self.time = -1
        self.max_skew_ms = max_skew_ms
        self.recent: list[int] = []

    def reference(self) -> int:
        """The stream time events are judged against (-1 before any event)."""
        recent = self.recent
        if not recent:
            return -1
        ordered = sorted(recent)
        return ordered[len(ordered) // 2]

    def check(self, ts: int) -> str | None:
        """None if `ts` is acceptable, else the reason it is not; either way `ts` joins the
        recent timestamps."""
        reference = self.reference()
        recent = self.recent
        recent.append(ts)
        if len(recent) > CLOCK_SPAN:
            del recent[0]
        if reference >= 0 and abs(ts - reference) > self.max_skew_ms:
            return f"ts {ts} is more than {self.max_skew_ms} ms from the stream time {reference}"
        if ts > self.time:
            self.time = ts
        return None

    def check_all(self, stamps: list[int]) -> list[tuple[int, str]]:
        """`check` for each of `stamps` in order; returns (index, reason) of those refused.

        When every stamp and every recent one lie within `max_skew_ms` of each other, no
        reference the checks could take (a median of those) is further than that from any
        stamp, so none is refused and the state after is known without checking one by one:
        the batch's last CLOCK_SPAN stamps (with the recent ones before them) and its largest.
        """
        if not stamps:
            return []
        recent = self.recent
        lo, hi = min(stamps), max(stamps)
        if recent:
            lo, hi = min(lo, min(recent)), max(hi, max(recent))
        if hi - lo <= self.max_skew_ms:
            tail = recent + stamps[-CLOCK_SPAN:] if len(stamps) < CLOCK_SPAN else stamps[-CLOCK_SPAN:]
            self.recent = tail[-CLOCK_SPAN:]
            top = max(stamps)
            if top > self.time:
                self.time = top
            return []
        refused: list[tuple[int, str]] = []
        for i in range(len(stamps)):
            reason = self.check(stamps[i])
            if reason is not None:
                refused.append((i, reason))
        return refused

    def seed(self, timestamps: list[int]) -> None:
        """Start from a stream's earlier event timestamps (oldest first): the state its
        clock had after them, as far as later checks can tell."""
        self.recent = list(timestamps[-CLOCK_SPAN:])
