"""The set of directives a broker is currently obeying, indexed for microsecond lookups.

Pure and clock-free: every query takes `now` (epoch ms), so the same code serves a broker's hot
path, a replay and the tests. Not thread-safe on its own; `DirectiveSubscriber` adds the lock.

Rules (documented in docs/, summarised here):
- Only directives for this broker are kept: `scope: "cluster"` always, `scope: "broker"` only when
  `broker` is the local id; `delay_connection` only when `entity.broker` is the local id or
  `"<default>"`. A set built with `broker_id=None` serves a proxy in front of several brokers
  (the gateway): it keeps every directive and each query names the broker it is for.
- Replacement: directives with the same (scope, broker, quota, action, entity) replace each other,
  newest `ts` wins (ties: the one applied last, i.e. the later offset). The newer one wins even if
  its `until` is earlier, so the processor can shorten or lift (until <= ts) a throttle, and the
  state rebuilt from the topic depends only on the last record per key. An older `ts` arriving
  after a newer one is ignored as stale.
- Different keys never replace each other; a query takes the largest `until - now` of all matching
  directives (contract: "the larger value when several directives match").
- A directive is active while `now < until`; at `now == until` it no longer applies.
- Client entity matching for a request from (u, c): {"user": u, "client_id": c} exactly;
  {"user": u, "client_id": ""} for every client id of u (u non-empty); {"user": "", "client_id": c}
  for every user with client id c. So {"user": "", "client_id": ""} matches only an empty client
  id, like Kafka's ("", "") sensor tags, never everyone.
"""

from __future__ import annotations

import heapq
from typing import Any, Collection, Iterator, Mapping, NamedTuple

from app.contract.directives import (
    CLIENT,
    DEFAULT,
    IP,
    LISTENER,
    MAX_FUTURE_MS,
    MUTATION,
    BadDirective,
    ParsedDirective,
    parse_directive,
)
from app.subscriber import allocations
from app.subscriber.allocations import Allocations

Directive = Mapping[str, Any]

# Outcomes of `ActiveSet.apply`, so a subscriber can count them.
ADDED, REPLACED, LIFTED, STALE, IGNORED = "added", "replaced", "lifted", "stale", "ignored"


class Throttle(NamedTuple):
    """Answer for a client request: throttle and mute the channel for `throttle_ms` if > 0."""

    throttle_ms: int
    mute: bool
    directives: tuple[Directive, ...]  # the matching active directives, deciding one first


class MutationDecision(NamedTuple):
    """Answer for CreateTopics/DeleteTopics/CreatePartitions: reject (THROTTLING_QUOTA_EXCEEDED)?"""

    reject: bool
    throttle_ms: int


class ConnectionDecision(NamedTuple):
    """Answer for a new connection: close it (per-IP rate) and/or hold the acceptor `delay_ms`.
    `close_ms` is how long the IP's throttle still runs: Kafka closes such a connection then."""

    close: bool
    delay_ms: int
    close_ms: int = 0


class _Entry:
    """One stored directive; `seq` tells a live entry from a replaced one in the expiry heap."""

    __slots__ = ("parsed", "until", "ts", "seq", "quota", "action", "directive", "alive",
                 "broker", "entity_broker")

    def __init__(self, parsed: ParsedDirective, seq: int) -> None:
        self.parsed = parsed
        self.until = parsed.until
        self.ts = parsed.ts
        self.seq = seq
        self.quota = parsed.quota
        self.action = parsed.action
        self.directive = parsed.directive
        self.alive = True
        self.broker = parsed.broker  # None for cluster scope: applies on every broker
        self.entity_broker = parsed.entity_broker


Bucket = dict[tuple[Any, ...], _Entry]
_NO_DIRECTIVES: tuple[Directive, ...] = ()


class ActiveSet:
    """Directives in force on one broker, keyed by entity so each query is a few dict lookups.

    `broker_id=None` keeps the directives of every broker, for a proxy in front of several;
    its queries then pass `broker`, the broker the request or connection is for.
    """

    def __init__(self, broker_id: int | None) -> None:
        self.broker_id = broker_id
        self._broker_str = str(broker_id)
        self._by_key: dict[tuple[Any, ...], _Entry] = {}
        self._tables: dict[str, dict[tuple[str, ...], Bucket]] = {
            CLIENT: {},
            MUTATION: {},
            IP: {},
            LISTENER: {},
        }
        self._client = self._tables[CLIENT]
        self._mutation = self._tables[MUTATION]
        self._ip = self._tables[IP]
        self._listener = self._tables[LISTENER]
        self._heap: list[tuple[int, int, _Entry]] = []
        self._seq = 0
        #: allocation records of the control topic (cluster scope), for `AllocatedLimits`
        self.allocations = Allocations()

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Directive]:
        return (entry.directive for entry in self._by_key.values())

    # ------------------------------------------------------------------ updates

    def applies_here(self, parsed: ParsedDirective) -> bool:
        """Scope filter: is this directive meant for the local broker (any, for a proxy)?"""
        if self.broker_id is None:
            return True
        if parsed.scope == "broker" and parsed.broker != self.broker_id:
            return False
        if parsed.entity_broker is not None:
            return parsed.entity_broker in (self._broker_str, DEFAULT)
        return True

    def apply(self, directive: Any, now: int | None = None) -> str:
        """Add or replace a directive; return ADDED/REPLACED/LIFTED/STALE/IGNORED.

        Raises `BadDirective` for an invalid record (a `ts` more than a day after `now`, too). With `now`, a directive already expired is not
        stored, but still replaces (removes) the entry it supersedes: that is how a lift works.
        """
        if isinstance(directive, Mapping) and directive.get("kind") == "allocation":
            outcome = self.allocations.apply(directive, now)
            return IGNORED if outcome in (allocations.STALE, allocations.EXPIRED) else outcome
        parsed = parse_directive(directive)
        if now is not None and parsed.ts > now + MAX_FUTURE_MS:
            raise BadDirective("ts_in_future", f"ts {parsed.ts} is more than a day after now {now}")
        if not self.applies_here(parsed):
            return IGNORED
        old = self._by_key.get(parsed.key)
        if old is not None and parsed.ts < old.ts:
            return STALE
        if now is not None and parsed.until <= now:
            if old is not None:
                self._remove(old)
            return LIFTED
        self._seq += 1
        entry = _Entry(parsed, self._seq)
        if old is not None:
            old.alive = False
        self._by_key[parsed.key] = entry
        self._tables[parsed.family].setdefault(parsed.bucket, {})[parsed.key] = entry
        heapq.heappush(self._heap, (entry.until, entry.seq, entry))
        self._maybe_compact_heap()
        return ADDED if old is None else REPLACED

    def expire(self, now: int, limit: int | None = None) -> int:
        """Drop directives with `until <= now`, O(log n) each; returns how many were dropped
        (allocations whose validity ended go too, uncounted).

        `limit` caps the work of one call so a caller holding a lock can release it between
        chunks; call again while it returns `limit`.
        """
        self.allocations.expire(now)
        heap, removed = self._heap, 0
        while heap and heap[0][0] <= now and (limit is None or removed < limit):
            entry = heapq.heappop(heap)[2]
            if entry.alive:
                self._remove(entry)
                removed += 1
        return removed

    def _remove(self, entry: _Entry) -> None:
        entry.alive = False
        parsed = entry.parsed
        del self._by_key[parsed.key]
        table = self._tables[parsed.family]
        bucket = table[parsed.bucket]
        del bucket[parsed.key]
        if not bucket:
            del table[parsed.bucket]

    def _maybe_compact_heap(self) -> None:
        """Replacements leave dead heap items; rebuild when they outnumber the live ones."""
        if len(self._heap) > 2 * len(self._by_key) + 1024:
            self._heap = [(e.until, e.seq, e) for e in self._by_key.values()]
            heapq.heapify(self._heap)

    # ------------------------------------------------------------------ queries

    def request_throttle(
        self, user: str, client_id: str, now: int, quotas: Collection[str] | None = None,
        broker: int | None = None,
    ) -> Throttle:
        """Throttle for a client request; `quotas` narrows to e.g. PRODUCE_QUOTAS (default: all)."""
        here = self.broker_id if broker is None else broker
        table = self._client
        buckets = (
            table.get((user, client_id)),
            table.get(("", client_id)) if user else None,
            table.get((user, "")) if user and client_id else None,
        )
        best = 0
        matched: list[_Entry] = []
        for bucket in buckets:
            if bucket:
                for entry in bucket.values():
                    left = entry.until - now
                    if left > 0 and (quotas is None or entry.quota in quotas) and (
                            entry.broker is None or entry.broker == here):
                        matched.append(entry)
                        if left > best:
                            best = left
        if not matched:
            return Throttle(0, False, _NO_DIRECTIVES)
        if len(matched) > 1:
            matched.sort(key=lambda e: e.until, reverse=True)
        return Throttle(best, True, tuple(e.directive for e in matched))

    def mutation(
        self, user: str, client_id: str, now: int, strict: bool = True, broker: int | None = None
    ) -> MutationDecision:
        """Controller mutation quota. `strict=False` (old request versions) never rejects: a
        `reject` directive then only throttles, as Kafka's permissive quota does."""
        here = self.broker_id if broker is None else broker
        table = self._mutation
        buckets = (
            table.get((user, client_id)),
            table.get(("", client_id)) if user else None,
            table.get((user, "")) if user and client_id else None,
        )
        best, reject = 0, False
        for bucket in buckets:
            if bucket:
                for entry in bucket.values():
                    left = entry.until - now
                    if left > 0 and (entry.broker is None or entry.broker == here):
                        if left > best:
                            best = left
                        if strict and entry.action == "reject":
                            reject = True
        return MutationDecision(reject, best)

    def connection(
        self, ip: str, listener: str, now: int, protected_listener: bool = False,
        broker: int | None = None,
    ) -> ConnectionDecision:
        """New connection on `listener` from `ip`. A protected (inter-broker) listener is exempt
        from the broker-wide rate, as in Kafka, but not from its own listener rate or IP rate."""
        here = self.broker_id if broker is None else broker
        close_ms = 0
        bucket = self._ip.get((ip,))
        if bucket:
            for entry in bucket.values():
                left = entry.until - now
                if left > close_ms and (entry.broker is None or entry.broker == here):
                    close_ms = left
        delay = 0
        table = self._listener
        local = self._broker_str if broker is None else str(broker)
        for bucket in (None if protected_listener else table.get(("",)), table.get((listener,))):
            if bucket:
                for entry in bucket.values():
                    left = entry.until - now
                    if left > delay and entry.entity_broker in (local, DEFAULT) and (
                            entry.broker is None or entry.broker == here):
                        delay = left
        return ConnectionDecision(close_ms > 0, delay, close_ms)


__all__ = [
    "ADDED",
    "REPLACED",
    "LIFTED",
    "STALE",
    "IGNORED",
    "ActiveSet",
    "BadDirective",
    "ConnectionDecision",
    "MutationDecision",
    "Throttle",
]
