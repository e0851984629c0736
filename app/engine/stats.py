"""Kafka's metric primitives, as state objects: the sampled `Rate` and the `TokenBucket`.

Accounting only: these know nothing about who shares a quota or what its limit is. The window
settings (N samples of W ms) are passed in rather than stored, because Kafka changes a metric's
config in place and the samples survive the change.

Time is the caller's: every method takes `now` in epoch ms from event timestamps. Each state
keeps the latest time it has seen (`clock`); the engine clamps an older event to that time so a
state never moves backwards (see `advance`).
"""

from __future__ import annotations

from array import array
from typing import Final

from app.engine.allocation import Shares

#: Where no sample was reset since `oldest` was cached.
UNKNOWN: Final = -1


class Rate:
    """SampledStat over WindowedSum, measured as Kafka's `Rate` (per second).

    Up to N + 1 samples exist at once (the extra one overlaps the start of the window). A sample
    is reset when its *last* event is N*W or more behind `now`. `window_size` is the elapsed time
    since the oldest sample started, but never less than (N - 1) full windows: a fresh stat
    with one 50-unit record measured 999 ms later with N=11, W=1 s reads 50 / 10.999 s.

    Values are doubles summed exactly as Kafka does (slot order, left to right), byte counts
    included: the same arithmetic as Kafka's, interpreted or compiled.

    The current sample's value and last time live in `cur_value` and `cur_last`, not in the
    slots (theirs are stale), and its start is mirrored in `cur_start`: compiled, they are
    unboxed, so recording into the current sample reads no slot and allocates nothing. Read the
    samples through `samples()`.

    Packed: the samples' start and last times (read only when a sample starts, by a purge and
    after a reset) are one `array` of 64-bit ints, two per slot: two heap blocks whatever the
    number of samples, where Python ints would be one object each. The values, which every
    measure sums, stay a list for the compiled hot path.
    """

    __slots__ = ("values", "times", "current", "cur_value", "cur_last", "cur_start",
                 "clock", "until", "purge_at", "oldest", "window")

    def __init__(self) -> None:
        self.values: list[float] = []
        #: per slot, its start then its last event time (ms)
        self.times: array[int] = array("q")
        self.current = 0
        self.cur_value = 0.0
        self.cur_last = 0
        self.cur_start = 0
        #: latest event time seen by this state (monotonic clamp)
        self.clock = 0
        #: `until` of the last directive published for this state (0 = none)
        self.until = 0
        # Derived, not persisted: a lower bound of min(lasts) + N*W (sample times only grow,
        # so before it no sample can be obsolete and the purge is skipped), the cached
        # min(starts) (UNKNOWN when a sample was reset), and the window of the last
        # `record_measure`.
        self.purge_at = 0
        self.oldest = UNKNOWN
        self.window = 0

    def samples(self) -> list[tuple[float, int, int]]:
        """(value, start, last) of every sample, in slot order."""
        times = self.times
        out = [(self.values[i], times[2 * i], times[2 * i + 1]) for i in range(len(self.values))]
        if out:
            c = self.current
            out[c] = (self.cur_value, times[2 * c], self.cur_last)
        return out

    def restore(self, current: int, samples: list[tuple[float, int, int]]) -> None:
        """Set the samples (as `samples()` gives them) and which one is current."""
        self.values = [v for v, _, _ in samples]
        times: array[int] = array("q")
        for _, start, last in samples:
            times.append(start)
            times.append(last)
        self.times = times
        self.current = current
        self.cur_value, self.cur_start, self.cur_last = samples[current] if samples else (0.0, 0, 0)
        self.purge_at = 0
        self.oldest = UNKNOWN

    def advance(self, t: int, idle_ms: int = 0) -> int:
        """Return the time to use for an event at `t`: never earlier than one already seen.

        A state idle for more than `idle_ms` (0: never) with no directive in force starts
        afresh, as Kafka expires an inactive sensor and creates a new one.
        """
        if t < self.clock:
            return self.clock
        if idle_ms and t - self.clock > idle_ms and self.until <= t and self.values:
            self.reset()
        self.clock = t
        return t

    def reset(self) -> None:
        """The state of a new `Rate` (its clock is set by the caller)."""
        self.values, self.times = [], array("q")
        self.current = 0
        self.cur_value = 0.0
        self.cur_last = self.cur_start = 0
        self.until = 0
        self.purge_at = 0
        self.oldest = UNKNOWN
        self.window = 0

    def _new_sample(self, now: int, n: int) -> None:
        """Move on to the next slot (a new sample starting at `now`), or create the first."""
        values = self.values
        times = self.times
        if values:
            c = self.current
            values[c] = self.cur_value
            times[2 * c + 1] = self.cur_last
            c = (c + 1) % (n + 1)
        else:
            c = 0
        self.current = c
        if c >= len(values):
            values.append(0.0)
            times.append(now)
            times.append(now)
        else:
            times[2 * c] = now
            self.oldest = UNKNOWN
        self.cur_value = 0.0
        self.cur_start = now

    def _oldest_start(self) -> int:
        """min(starts), the current sample's included."""
        times = self.times
        oldest = times[0]
        for i in range(2, len(times), 2):
            start = times[i]
            if start < oldest:
                oldest = start
        return oldest

    def record(self, value: float, now: int, n: int, w: int) -> None:
        """SampledStat.record: add to the current sample, moving on one slot if it is complete."""
        if now - self.cur_start >= w or not self.values:
            self._new_sample(now, n)
        self.cur_value += value
        self.cur_last = now

    def record_measure(self, value: float, now: int, n: int, w: int) -> float:
        """`record` then `measure`, as Sensor.record with a quota check does, on the hot path:
        returns the rate and leaves the window it was measured over in `self.window`."""
        self.record(value, now, n, w)
        if now >= self.purge_at:
            self.purge(now, n, w)
        oldest = self.oldest
        if oldest == UNKNOWN:
            oldest = self.oldest = self._oldest_start()
        elapsed = now - oldest
        full = elapsed // w
        if full < n - 1:
            elapsed += (n - 1 - full) * w
        window = elapsed if elapsed > 1 else 1
        self.window = window
        return self.total() / (window / 1000.0)

    def purge(self, now: int, n: int, w: int) -> None:
        """purgeObsoleteSamples: reset samples whose last event left the N*W window."""
        expire = n * w
        times = self.times
        c = self.current
        count = len(self.values)
        earliest = 0
        for i in range(count):
            last = self.cur_last if i == c else times[2 * i + 1]
            if now - last >= expire:
                times[2 * i] = now
                self.oldest = UNKNOWN
                last = now
                if i == c:
                    self.cur_value = 0.0
                    self.cur_last = now
                    self.cur_start = now
                else:
                    self.values[i] = 0.0
                    times[2 * i + 1] = now
            if i == 0 or last < earliest:
                earliest = last
        self.purge_at = earliest + expire if count else 0

    def measure(self, now: int, n: int, w: int) -> tuple[float, int]:
        """Rate.measure and Rate.windowSize at `now`: (rate per second, window in ms).

        Like Kafka, measuring purges, and an empty stat gains a sample starting at `now`.
        """
        self.purge(now, n, w)
        total = self.total()
        window = self.window_after_purge(now, n, w)
        return total / (window / 1000.0), window

    def peek(self, now: int, n: int, w: int) -> float:
        """What `measure(now)` would return, leaving the state as it is: a reader's view (the
        console) must not purge or start samples, which would move later decisions."""
        values = self.values
        if not values:
            return 0.0
        expire = n * w
        times = self.times
        c = self.current
        total = 0.0
        oldest = now
        for i in range(len(values)):
            last = self.cur_last if i == c else times[2 * i + 1]
            if now - last >= expire:
                continue  # purged: value 0, starting at `now`
            total += self.cur_value if i == c else values[i]
            start = times[2 * i]
            if start < oldest:
                oldest = start
        elapsed = now - oldest
        full = elapsed // w
        if full < n - 1:
            elapsed += (n - 1 - full) * w
        return total / ((elapsed if elapsed > 1 else 1) / 1000.0)

    def window_after_purge(self, now: int, n: int, w: int) -> int:
        if not self.values:
            self._new_sample(now, n)
            self.cur_last = now
        elapsed = now - self._oldest_start()
        full = elapsed // w
        if full < n - 1:
            elapsed += (n - 1 - full) * w
        return elapsed if elapsed > 1 else 1

    def window_size(self, now: int, n: int, w: int) -> int:
        """Rate.windowSize: purge, then (N-1)*W at least, else the time since the oldest start."""
        self.purge(now, n, w)
        return self.window_after_purge(now, n, w)

    def total(self) -> float:
        """The samples' sum, left to right in slot order as Kafka adds them (unlike `sum` on
        Python 3.12+, which compensates rounding and can differ in the last bit)."""
        values = self.values
        if not values:
            return 0.0
        c = self.current
        total = 0.0
        for i in range(c):
            total += values[i]
        total += self.cur_value
        for i in range(c + 1, len(values)):
            total += values[i]
        return total


class TokenBucket:
    """KIP-599's token bucket: Q tokens per second, burst Q*N*W, allowed to go negative.

    A new bucket starts full (Kafka's first refill from time 0 saturates it). Worked example
    from Kafka's TokenBucket comment: Q=5/s, N=10, W=2 s gives burst 100; 60 units at t=0 leave
    40; 5 more at t=2 s refill 10 first and leave 45; 60 at t=4 s leave -5.
    """

    __slots__ = ("tokens", "last", "clock", "until")

    def __init__(self, tokens: float = 0.0, now: int = 0) -> None:  # defaults: pickle (compiled)
        self.tokens = tokens
        self.last = now
        self.clock = now
        self.until = 0

    def advance(self, t: int, idle_ms: int = 0, full: float = 0.0) -> int:
        """As `Rate.advance`; a bucket that starts afresh is full (`full`)."""
        if t < self.clock:
            return self.clock
        if idle_ms and t - self.clock > idle_ms and self.until <= t:
            self.tokens, self.last, self.until = full, t, 0
        self.clock = t
        return t

    def refill(self, now: int, rate: float, burst: float) -> float:
        tokens = self.tokens + rate * ((now - self.last) / 1000.0)
        self.tokens = burst if tokens > burst else tokens
        self.last = now
        return self.tokens

    def record(self, value: float, now: int, rate: float, burst: float) -> None:
        self.refill(now, rate, burst)
        tokens = self.tokens - value
        self.tokens = burst if tokens > burst else tokens


def idle(state: Rate | TokenBucket | Shares, now: int, idle_ms: int) -> bool:
    """Whether a state would start afresh at `now` (what `advance` checks): safe to drop."""
    return now - state.clock > idle_ms and state.until <= now


def burst(rate: float, n: int, w: int) -> float:
    """TokenBucket burst: N * (W / 1000.0) * Q, in the same operation order as Kafka."""
    return n * (w / 1000.0) * rate
