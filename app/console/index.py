"""What one worker knows for the console: each window's latest check, what it published, and
the recent history of a bounded set of windows.

The engine already hands each check to the driver (`apply_record`'s `latest`: a `Window` on the
columnar path, a `Decision` on the row path, both with quota, entity, limit and the rate the
check measured). The index keeps that dict per samples partition and never copies it, so
the console adds nothing per sample: its costs are per query and once a second for the
history.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from app.contract.entities import entity_string
from app.contract.keys import canonical_json
from app.engine.configs import MUTATION
from app.engine.engine import SEP, Decision
from app.engine.kafka_math import INT_MAX_F, UNLIMITED
from app.engine.stats import Rate

#: how long an entity chart goes back, in seconds (one point a second)
HISTORY_S = 900
#: throttle marks kept per charted entity and quota
MARKS_KEPT = 300


def check_time(check: Any) -> int:
    """Event time (ms) of a window's latest check."""
    if type(check) is Decision:
        return int(check.ts)
    rate = check.rate
    return int(rate.clock) if rate is not None else 0


def check_level(check: Any) -> str | None:
    return check.config_level if type(check) is Decision else check.level


def check_broker(check: Any) -> int | None:
    """The broker a window is on (broker scope), None for a cluster-wide window."""
    if type(check) is Decision:
        return check.broker
    where = str(check.key).split(SEP, 2)[1]
    return None if where == "*" else int(where)


#: an entity's key as `entity_id` issues it
ENTITY_ID = re.compile(r"[0-9a-f]{24}")


def entity_id(entity: Mapping[str, Any]) -> str:
    """A short key naming an entity in a page's URL, whatever its names: a 1,024-character
    name's JSON in a query string outgrows aiohttp's 8,190-byte request line. Derived from the
    entity alone, so every worker issues the same one."""
    return hashlib.blake2b(canonical_json(dict(entity)), digest_size=12).hexdigest()


def limit_or_none(limit: float) -> float | None:
    """None for no limit (Kafka's max.connection.creation.rate default is Int.MaxValue)."""
    return None if limit >= UNLIMITED or limit == INT_MAX_F else limit


def usage(check: Any) -> tuple[float | None, float | None]:
    """(rate, utilization) of a window's latest check. A token bucket (controller mutations)
    has no rate to show: its utilization is the share of its burst spent (over 1: in debt,
    throttled), its `observed` the tokens left."""
    limit = limit_or_none(check.limit)
    if check.quota == MUTATION:
        if limit is None:
            return None, None
        return None, 1.0 - check.observed / (limit * check.window_ms / 1000.0)
    return check.observed, (check.observed / limit if limit else None)


def chart_reading(check: Any, state: Any, now_ms: int, n: int, w: int, elapsed_s: int
                  ) -> tuple[float, float | None, dict[int, float]]:
    """One history point of a charted window: its rate now (read without changing the window),
    its limit, and its usage per source over the last `elapsed_s` seconds, which the engine's
    checks summed into `Window.sources`; the sums start afresh (the first point has none)."""
    parts: dict[int, float] = {}
    if type(check) is not Decision:  # a Window: the engine counts its usage per source
        if check.sources is not None:
            parts = {source: used / elapsed_s for source, used in check.sources.items()}
        check.sources = {}
    rate = state.peek(max(now_ms, state.clock), n, w) if isinstance(state, Rate) \
        else check.observed
    return rate, limit_or_none(check.limit), parts


class Series:
    """One window's rate, a point a second for HISTORY_S, with its usage per source (broker
    or gateway) over each second; points are float32 in a ring."""

    __slots__ = ("total", "parts", "limit")

    def __init__(self) -> None:
        self.total = array("f", [float("nan")] * HISTORY_S)
        self.parts: dict[int, array[float]] = {}
        self.limit = array("f", [float("nan")] * HISTORY_S)

    def put(self, now_s: int, rate: float, limit: float | None,
            parts: Mapping[int, float]) -> None:
        slot = now_s % HISTORY_S
        self.total[slot] = rate
        self.limit[slot] = float("nan") if limit is None else limit
        for enforcer, value in parts.items():
            ring = self.parts.get(enforcer)
            if ring is None:
                ring = self.parts[enforcer] = array("f", [float("nan")] * HISTORY_S)
            ring[slot] = value
        for enforcer, ring in self.parts.items():
            if enforcer not in parts:
                ring[slot] = float("nan")

    def points(self, now_s: int, seconds: int = HISTORY_S) -> dict[str, Any]:
        """The last `seconds` seconds, oldest first: {"start_s", "total", "limit", "parts"};
        a second with no reading is None."""
        seconds = min(seconds, HISTORY_S)
        start = now_s - seconds + 1

        def read(ring: array[float]) -> list[float | None]:
            out: list[float | None] = []
            for s in range(start, now_s + 1):
                v = ring[s % HISTORY_S]
                out.append(None if v != v else float(v))  # NaN: no reading that second
            return out

        return {"start_s": start, "total": read(self.total), "limit": read(self.limit),
                "parts": {str(e): read(r) for e, r in sorted(self.parts.items())}}


class History:
    """Per-second rates of at most `capacity` windows: the busiest by utilization (chosen
    again every `choose`) and those pinned because someone opened them. A window that leaves
    the set loses its history; memory is bounded by `capacity` whatever the entity count."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.series: dict[str, Series] = {}
        #: key -> the second until which an opened window stays charted
        self.pinned: dict[str, int] = {}
        self.last_s = -1
        #: windows no longer charted since the last `take_dropped` (their per-source counting
        #: is to be stopped)
        self.dropped: list[str] = []

    def take_dropped(self) -> list[str]:
        dropped, self.dropped = self.dropped, []
        return dropped

    def pin(self, key: str, now_s: int) -> None:
        """Chart `key` from now on, for HISTORY_S (someone opened it), in place of the least
        recently chosen unpinned window if the set is full."""
        if not self.capacity:
            return
        self.pinned[key] = now_s + HISTORY_S
        if key in self.series:
            return
        if len(self.series) >= self.capacity:
            spare = next((k for k in self.series if k not in self.pinned), None)
            if spare is None:
                del self.pinned[key]
                return
            del self.series[spare]
            self.dropped.append(spare)
        self.series[key] = Series()

    def choose(self, busiest: list[str], now_s: int) -> None:
        """Keep the pinned windows and fill the rest with `busiest` (most utilized first)."""
        for key, until in list(self.pinned.items()):
            if until < now_s:
                del self.pinned[key]
        keep = list(self.pinned)[: self.capacity]
        room = self.capacity - len(keep)
        for key in busiest:
            if room <= 0:
                break
            if key not in self.pinned:
                keep.append(key)
                room -= 1
        wanted = set(keep)
        for key in [k for k in self.series if k not in wanted]:
            del self.series[key]
            self.dropped.append(key)
        for key in keep:
            if key not in self.series:
                self.series[key] = Series()

    def record(self, now_s: int, reading: Callable[[str], tuple[float, float | None,
                                                             Mapping[int, float]] | None]
               ) -> None:
        """One point for each charted window (`reading(key)`: rate, limit, per enforcer; None:
        the window is gone). Seconds skipped since the last call read as no reading."""
        if now_s <= self.last_s:
            return
        # the seconds since the last point read as none (a new ring holds none already)
        gap = range(max(self.last_s + 1, now_s - HISTORY_S + 1), now_s) if self.last_s >= 0 \
            else range(0)
        for key, series in list(self.series.items()):
            value = reading(key)
            if value is None:
                del self.series[key]
                continue
            for s in gap:
                slot = s % HISTORY_S
                series.total[slot] = series.limit[slot] = float("nan")
                for ring in series.parts.values():
                    ring[slot] = float("nan")
            series.put(now_s, *value)
        self.last_s = now_s

    def forget(self, keys: Iterator[str] | list[str] | set[str]) -> None:
        for key in keys:
            self.series.pop(key, None)
            self.pinned.pop(key, None)


class ConsoleIndex:
    """The latest check of every window this worker holds, per samples partition, with what it
    published (directives and allocations in force) and the charted windows' history."""

    def __init__(self, history_windows: int) -> None:
        #: per samples partition: state key -> the window's latest check (`apply_record`'s
        #: `latest`, filled by the engine step itself)
        self.partitions: dict[int, dict[str, Any]] = {}
        #: (quota, entity label) -> the latest directive or allocation published for it
        self.published: dict[tuple[str, str], dict[str, Any]] = {}
        #: (quota, entity label) -> recent throttles (ts ms, throttle ms), charted entities only
        self.marks: dict[tuple[str, str], deque[tuple[int, int]]] = {}
        self.history = History(history_windows)
        #: state key -> (entity label, entity id), computed once per window
        self._names: dict[str, tuple[str, str]] = {}

    def checks(self, partition: int) -> dict[str, Any]:
        """The dict the engine step of `partition` fills with its checks."""
        found = self.partitions.get(partition)
        if found is None:
            found = self.partitions[partition] = {}
        return found

    def __len__(self) -> int:
        return sum(len(p) for p in self.partitions.values())

    def items(self) -> Iterator[tuple[int, str, Any]]:
        """(partition, state key, latest check) of every window."""
        for partition, checks in self.partitions.items():
            for key, check in checks.items():
                yield partition, key, check

    def locate(self, key: str) -> tuple[int, Any] | None:
        """(partition, latest check) of a window, or None."""
        for partition, checks in self.partitions.items():
            found = checks.get(key)
            if found is not None:
                return partition, found
        return None

    def _named(self, key: str, check: Any) -> tuple[str, str]:
        found = self._names.get(key)
        if found is None:
            found = self._names[key] = (entity_string(check.entity), entity_id(check.entity))
        return found

    def label(self, key: str, check: Any) -> str:
        return self._named(key, check)[0]

    def entity_id(self, key: str, check: Any) -> str:
        return self._named(key, check)[1]

    def forget(self, partition: int, keys: list[str]) -> None:
        """Windows that expired (their states left the store)."""
        checks = self.partitions.get(partition, {})
        for key in keys:
            checks.pop(key, None)
            self._names.pop(key, None)
        self.history.forget(keys)

    def forget_partition(self, partition: int) -> None:
        """A partition this worker no longer holds (its new owner shows it)."""
        checks = self.partitions.pop(partition, {})
        for key in checks:
            self._names.pop(key, None)
        self.history.forget(list(checks))

    def published_record(self, record: Mapping[str, Any]) -> None:
        """A directive or an allocation this worker just published."""
        label = entity_string(record["entity"])
        self.published[(record["quota"], label)] = dict(record)
        marks = self.marks.get((record["quota"], label))
        if marks is not None and record.get("kind") != "allocation":
            marks.append((int(record["ts"]), int(record["throttle_time_ms"])))

    def in_force(self, quota: str, label: str, now_ms: int) -> dict[str, Any] | None:
        record = self.published.get((quota, label))
        if record is None:
            return None
        until = record.get("valid_until", record.get("until", 0))
        return record if until > now_ms else None

    def prune(self, now_ms: int) -> None:
        """Drop published records no longer in force, and marks of entities not charted."""
        for key in [k for k, r in self.published.items()
                    if r.get("valid_until", r.get("until", 0)) <= now_ms]:
            del self.published[key]
        charted = set()
        for key in self.history.series:
            found = self.locate(key)
            if found is not None:
                charted.add((found[1].quota, self.label(key, found[1])))
        for key in [k for k in self.marks if k not in charted]:
            del self.marks[key]
        for key in charted:
            if key not in self.marks:
                self.marks[key] = deque(maxlen=MARKS_KEPT)

    def busiest(self, n: int, since_ms: int) -> tuple[list[tuple[str, Any]], int]:
        """The `n` windows checked since `since_ms` with the highest observed / limit, and how
        many of those checked since then were over their limit (one pass over every window)."""
        over = 0

        def recent() -> Iterator[tuple[float, str, Any]]:
            nonlocal over
            for checks in self.partitions.values():
                for key, check in checks.items():
                    if check_time(check) >= since_ms:
                        utilization = usage(check)[1]
                        if utilization is None:
                            continue
                        if utilization > 1.0:
                            over += 1
                        yield utilization, key, check

        top = heapq.nlargest(n, recent(), key=lambda item: item[0])
        return [(key, check) for _, key, check in top], over

