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
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from app.engine.allocation import LEND, MAX_ENFORCERS
from app.engine.engine import ALLOCATED
from app.engine.kafka_math import UNLIMITED
from app.subscriber.directive import MAX_FUTURE_MS, BadDirective

#: how long after its `ts` an allocation may stay valid (a longer one is forged or broken)
MAX_VALIDITY_MS = 3_600_000
#: the largest limit a quota config may hold (contract: amounts up to 10^15)
MAX_LIMIT = 1e15

ADDED, REPLACED, STALE, EXPIRED = "added", "replaced", "stale", "expired"


@dataclass(frozen=True, slots=True)
class Allocation:
    """One validated allocation record."""

    quota: str
    user: str
    client_id: str
    ts: int
    valid_until: int
    limit: float
    others: float
    enforcers: Mapping[int, float]

    def limit_for(self, enforcer: int) -> float:
        """This enforcer's limit: its own, or the floor of those the allocation does not list."""
        return self.enforcers.get(enforcer, self.others)


def _int(d: Mapping[str, Any], name: str) -> int:
    value = d.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadDirective("wrong_type", f"{name} must be a non-negative integer")
    return value


def _amount(d: Mapping[str, Any], name: str, most: float) -> float:
    value = d.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadDirective("wrong_type", f"{name} must be a number")
    if not math.isfinite(value) or value < 0 or value > most:
        raise BadDirective("out_of_range", f"{name} must be within [0, {most:g}]")
    return float(value)


def parse_allocation(record: Any) -> Allocation:
    """Validate a decoded allocation record; raise `BadDirective` when it is unusable."""
    if not isinstance(record, Mapping) or record.get("kind") != "allocation":
        raise BadDirective("not_an_allocation")
    if record.get("v") != 1 or isinstance(record.get("v"), bool):
        raise BadDirective("wrong_version", repr(record.get("v")))
    quota = record.get("quota")
    if quota not in ALLOCATED:
        raise BadDirective("bad_quota", repr(quota)[:64])
    entity = record.get("entity")
    if not isinstance(entity, Mapping):
        raise BadDirective("bad_entity", "entity must be an object")
    parts = []
    for name in ("user", "client_id"):
        value = entity.get(name, "")
        if not isinstance(value, str) or len(value) > 1024:
            raise BadDirective("bad_entity", f"entity.{name} must be a string")
        parts.append(value)
    ts, valid_until = _int(record, "ts"), _int(record, "valid_until")
    if not ts < valid_until <= ts + MAX_VALIDITY_MS:
        raise BadDirective("bad_validity", f"valid_until must be within (ts, ts + {MAX_VALIDITY_MS}]")
    limit = _amount(record, "limit", MAX_LIMIT)
    others = _amount(record, "others", limit)
    rows = record.get("enforcers")
    if not isinstance(rows, list) or len(rows) > MAX_ENFORCERS:
        raise BadDirective("bad_enforcers", f"enforcers must be a list of at most {MAX_ENFORCERS}")
    enforcers: dict[int, float] = {}
    for row in rows:
        if not isinstance(row, Mapping):
            raise BadDirective("bad_enforcers", "an enforcer entry must be an object")
        enforcers[_int(row, "enforcer")] = _amount(row, "limit", limit)
    if sum(enforcers.values()) > limit * (1 + LEND + 1e-9):
        raise BadDirective("over_quota", f"the enforcers' limits add up to more than "
                           f"{1 + LEND:g} x the quota")
    return Allocation(quota, parts[0], parts[1], ts, valid_until, limit, others, enforcers)


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
    enforcer's allocation scaled to the quota in force, or quota / live enforcers without one."""

    def __init__(self, allocations: Allocations, live_enforcers: Callable[[], int]) -> None:
        self.allocations = allocations
        self.live_enforcers = live_enforcers

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
