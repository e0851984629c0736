"""Pacing and reporting shared by the client programs."""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from typing import Any, TextIO


class Pace:
    """Offers `rate` units per second without catching up: time spent blocked is not made up
    afterwards (an offered load, not a backlog). `burst` caps the tokens saved while idle."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = 0.0
        self.last = time.monotonic()

    def take(self, amount: float) -> float:
        """Seconds to wait before `amount` may go (0: take it now)."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= amount:
            self.tokens -= amount
            return 0.0
        return (amount - self.tokens) / self.rate


class Reporter:
    """Counts per second of run time and prints one JSON line per second:
    `{"t": <second>, "name": ..., <counter>: <amount in that second>, ...}`, then a last line
    with `"final": true` and the totals. With `epoch` (wall-clock seconds) the seconds count
    from it, so the lines of clients started together line up."""

    def __init__(self, name: str, out: TextIO = sys.stdout, epoch: float | None = None) -> None:
        self.name = name
        self.out = out
        self.start = time.monotonic() - (0.0 if epoch is None else time.time() - epoch)
        self.second = 0
        self.current: defaultdict[str, float] = defaultdict(float)
        self.totals: defaultdict[str, float] = defaultdict(float)
        #: facts of the run for the last line (e.g. how long a consumer's group join took)
        self.notes: dict[str, Any] = {}

    def restart(self) -> None:
        """Count from now: second 0 starts here (a client whose run begins later than its
        process, e.g. a consumer once its group assigned it partitions)."""
        self.start = time.monotonic()
        self.second = 0
        self.current = defaultdict(float)

    def add(self, counter: str, amount: float = 1) -> None:
        self.tick()
        self.current[counter] += amount
        self.totals[counter] += amount

    def tick(self) -> None:
        """Emit the lines of every second that has ended."""
        now = int(time.monotonic() - self.start)
        while self.second < now:
            self._line({"t": self.second, **self.current})
            self.current = defaultdict(float)
            self.second += 1

    def finish(self, **extra: Any) -> None:
        self.tick()
        self._line({"final": True, "seconds": time.monotonic() - self.start, **self.totals,
                    **self.notes, **extra})

    def _line(self, data: dict[str, Any]) -> None:
        self.out.write(json.dumps({"name": self.name, **data}) + "\n")
        self.out.flush()
