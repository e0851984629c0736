"""The allocations an enforcer obeys: its share of each cluster-scope client quota.

Workers publish, per cluster-scope window, the limit each enforcer holds
(`app.engine.allocation`, docs/contract.md "Allocations"). An enforcer (a named gateway, or the
gateway or simulated broker standing for a broker) runs the engine over its own requests in
broker scope with `AllocatedLimits` as the engine's limits: the window's limit on this enforcer
is its allocation while that is valid, and a static split of the quota (quota / live enforcers)
before the first one and after the last one ends. So when the workers stop, every enforcer
still holds its part and the sum still holds the quota: nobody becomes unlimited.

Pure and clock-free: times are passed in.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable

from app.contract.allocations import Allocation, parse_allocation
from app.contract.directives import MAX_FUTURE_MS, BadDirective
from app.engine.engine import ALLOCATED
from app.engine.kafka_math import UNLIMITED

ADDED, REPLACED, STALE, EXPIRED = "added", "replaced", "stale", "expired"


class Allocations:
    """The newest allocation per (quota, entity), dropped when its validity ends.

    `version` changes whenever what `get` answers may have changed, so an engine can drop
    the limits it derived.
    """

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str, str], Allocation] = {}
        self._ends: list[tuple[int, tuple[str, str, str]]] = []
        self.version = 0

    def __len__(self) -> int:
        return len(self._by_key)

    def apply(self, record: Any, now: int | None = None) -> str:
        """Take an allocation record; ADDED, REPLACED, STALE (older than the one held) or
        EXPIRED (its validity already ended). Raises `BadDirective` for a bad one."""
        a = parse_allocation(record)
        if now is not None and a.ts > now + MAX_FUTURE_MS:
            raise BadDirective("ts_in_future", f"ts {a.ts} is more than a day after now {now}")
        key = (a.quota, a.user, a.client_id)
        old = self._by_key.get(key)
        if old is not None and a.ts < old.ts:
            return STALE
        if now is not None and a.valid_until <= now:
            return EXPIRED
        self._by_key[key] = a
        heapq.heappush(self._ends, (a.valid_until, key))
        self.version += 1
        return ADDED if old is None else REPLACED

    def expire(self, now: int) -> int:
        """Drop allocations whose validity ended by `now`; how many."""
        ends, dropped = self._ends, 0
        while ends and ends[0][0] <= now:
            end, key = heapq.heappop(ends)
            held = self._by_key.get(key)
            if held is not None and held.valid_until <= now:
                del self._by_key[key]
                dropped += 1
        if dropped:
            self.version += 1
        return dropped

    def get(self, quota: str, user: str, client_id: str) -> Allocation | None:
        return self._by_key.get((quota, user, client_id))


class AllocatedLimits:
    """The engine's limits on one enforcer (`QuotaEngine(limits=...)`): for a client quota, the
    enforcer's allocation scaled to the quota in force, or quota / live enforcers without one.
    `kafka_formula`: held as a broker running the broker plugin holds them (`Limits`)."""

    def __init__(self, allocations: Allocations, live_enforcers: Callable[[], int],
                 kafka_formula: bool = False) -> None:
        self.allocations = allocations
        self.live_enforcers = live_enforcers
        self.kafka_formula = kafka_formula

    @property
    def version(self) -> int:
        return self.allocations.version

    def at(self, now: int) -> None:
        """Let allocations whose validity ended by `now` go (then the static split applies)."""
        self.allocations.expire(now)

    def limit(self, quota: str, user: str, client_id: str, enforcer: int, full: float) -> float:
        if quota not in ALLOCATED or full >= UNLIMITED:
            return full
        a = self.allocations.get(quota, user, client_id)
        if a is None or a.limit <= 0.0:
            return self.split(full)
        return a.limit_for(enforcer) * full / a.limit

    def split(self, full: float) -> float:
        return full / max(1, self.live_enforcers())
