"""How far behind their input the demo's workers are, read from each worker's `/metrics`.

A worker exports `quota_streams_consumer_lag_seconds{topic,partition}`: how long its records
waited to be taken (`app.pipeline.lag_meter`). The demo reads it every second from every
worker it started and keeps the largest, with where it was, so its summary can say whether the
workers kept pace for the whole run.
"""

from __future__ import annotations

import asyncio
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

METRIC = "quota_streams_consumer_lag_seconds"
_SAMPLE = re.compile(METRIC + r'\{([^}]*)\}\s+(\S+)')
_LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Lag:
    """The largest lag one reading found: seconds, and the partition (`topic/partition`)."""

    seconds: float
    where: str


def largest_lag(metrics_text: str) -> Lag | None:
    """The largest lag in a worker's `/metrics` page; None when it exports none (no
    partition assigned yet)."""
    best: Lag | None = None
    for labels, value in _SAMPLE.findall(metrics_text):
        try:
            seconds = float(value)
        except ValueError:
            continue
        names = dict(_LABEL.findall(labels))
        where = f"{names.get('topic', '?')}/{names.get('partition', '?')}"
        if best is None or seconds > best.seconds:
            best = Lag(seconds, where)
    return best


class LagProbe:
    """Reads the lag of the workers whose HTTP ports are given (on 127.0.0.1)."""

    def __init__(self, ports: list[int], timeout_s: float = 0.5) -> None:
        self.ports = ports
        self.timeout_s = timeout_s

    def _read(self, port: int) -> Lag | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                        timeout=self.timeout_s) as page:
                return largest_lag(page.read().decode("utf-8", "replace"))
        except (urllib.error.URLError, OSError, ValueError):
            return None  # a worker restarting, or not serving yet: no reading this second

    async def __call__(self) -> Lag | None:
        """The largest lag over every worker now (None: no worker answered)."""
        readings = await asyncio.gather(*(asyncio.to_thread(self._read, p) for p in self.ports))
        found = [r for r in readings if r is not None]
        return max(found, key=lambda r: r.seconds) if found else None
