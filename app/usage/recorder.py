"""`UsageRecorder`: the contract events a broker-side component records between two flushes.

Pure (no clock, no I/O): callers pass each event's time. `flush()` hands back what was recorded
since the last one, as `Span`s, and forgets it. A span holds at most `span_ms` of event time
(the flush interval): when an event comes `span_ms` or more after its span's first, it opens
the next span, so a publisher that fell behind still sends records that each cover one flush
interval, and aggregation never merges requests further apart than that.

Request events are kept as columns (`RequestColumns`, what the columnar record encodes and the
workers' engine reads), one row per request, never one object per event. With `aggregate`,
the requests of one (broker, user, client id, api, listener, ip, exempt) within a span are one
row with `count` > 1 and summed amounts, at the time of the last one: what a busy broker sends
instead of one event per request (the contract's `count`). Broker scope stays exact per event
only without it. Request times are summed in whole nanoseconds, the unit Kafka's request quota
counts each request in. Connections and mutations are rows of their own (tuples, rarer).

User names and client ids are charged under their bounded form (`app.usage.names`), so the
workers never dead-letter them for their length.

`gateway` names the gateway instance recording (`--gateway-id`): its request events carry it, so
allocations are divided among gateways (`RequestEvent.enforcer`).

`max_pending` bounds memory while the events cannot be sent (a broker down): past it, new events
are dropped and counted (`drops`, reason `buffer_full`), never queued without end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from app.engine.batch import RequestColumns
from app.engine.engine import nanos
from app.engine.events import MAX_THROTTLE_MS
from app.usage.drops import BUFFER_FULL, Drops
from app.usage.names import charged_name

REQUEST, CONNECTION, MUTATION = "request", "connection", "mutation"
KINDS = (REQUEST, CONNECTION, MUTATION)

_AggKey = tuple[int, str, str, str, str, str, bool]


class Connection(NamedTuple):
    """One accepted connection."""

    broker: int
    ts: int
    listener: str
    ip: str
    inter_broker: bool


class Mutation(NamedTuple):
    """The partitions of one topic of a CreateTopics & co. request."""

    broker: int
    ts: int
    user: str
    client_id: str
    api: str
    api_version: int
    partitions: int
    validate_only: bool


class Span:
    """The events of at most `span_ms` of event time, from `start` on, in recording order."""

    __slots__ = ("connections", "mutations", "requests", "rows", "start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.requests = RequestColumns()
        self.connections: list[Connection] = []
        self.mutations: list[Mutation] = []
        #: aggregation: the row of each request key in `requests`
        self.rows: dict[_AggKey, int] = {}

    def __len__(self) -> int:
        return len(self.requests) + len(self.connections) + len(self.mutations)


class UsageRecorder:
    """Events recorded since the last `flush()`, in spans of at most `span_ms` of event time."""

    def __init__(self, aggregate: bool = False, max_pending: int = 1_000_000,
                 on_first: Callable[[], None] | None = None, gateway: int | None = None,
                 span_ms: int = 5, drops: Drops | None = None) -> None:
        """`on_first` is called when an event is recorded while none is pending: a publisher
        can sleep until there is something to send."""
        self.aggregate = aggregate
        self.gateway = -1 if gateway is None else gateway
        self.max_pending = max_pending
        self.on_first = on_first
        self.span_ms = span_ms
        self.drops = Drops() if drops is None else drops
        self.pending = 0
        self.recorded = 0
        self._spans: list[Span] = []
        self._span: Span | None = None
        self._span_end = 0

    def _space(self, ts: int) -> Span | None:
        """The span an event at `ts` goes to, if one more event may wait; else None (counted)."""
        if self.pending >= self.max_pending:
            self.drops.add(BUFFER_FULL, 1)
            return None
        if not self.pending and self.on_first is not None:
            self.on_first()
        self.pending += 1
        self.recorded += 1
        span = self._span
        if span is None or ts >= self._span_end:
            span = self._span = Span(ts)
            self._span_end = ts + self.span_ms
            self._spans.append(span)
        return span

    def request(self, broker: int, ts: int, listener: str, user: str, client_id: str, ip: str,
                api: str, nbytes: int, thread_ms: float, network_ms: float,
                exempt: bool = False, count: int = 1, throttle_ms: int = 0) -> None:
        """One request: `nbytes` (Produce request / Fetch response size), thread and network time,
        and the throttle it was answered with. `count` 0: more of a request an earlier call
        counted (a Produce's time, after its bytes)."""
        if self.aggregate:
            span = self._span
            if span is not None and ts < self._span_end:
                key = (broker, user, client_id, api, listener, ip, exempt)
                row = span.rows.get(key)
                if row is not None:
                    rows = span.requests
                    rows.ts[row] = ts
                    rows.bytes[row] += nbytes
                    rows.thread_ns[row] += nanos(thread_ms)
                    rows.network_ns[row] += nanos(network_ms)
                    rows.count[row] += count
                    if throttle_ms:
                        rows.throttle_ms[row] = min(MAX_THROTTLE_MS,
                                                    rows.throttle_ms[row] + throttle_ms)
                    self.recorded += 1
                    return
        span = self._space(ts)
        if span is None:
            return
        rows = span.requests
        if self.aggregate:
            span.rows[(broker, user, client_id, api, listener, ip, exempt)] = len(rows)
        rows.append(ts, broker, self.gateway, listener, charged_name(user), charged_name(client_id),
                    ip, api, nbytes, nanos(thread_ms), nanos(network_ms), exempt, count, 0, 0,
                    min(MAX_THROTTLE_MS, throttle_ms))

    def connection(self, broker: int, ts: int, listener: str, ip: str,
                   inter_broker: bool = False) -> None:
        """One accepted connection."""
        span = self._space(ts)
        if span is not None:
            span.connections.append(Connection(broker, ts, listener, ip, inter_broker))

    def mutation(self, broker: int, ts: int, user: str, client_id: str, api: str,
                 api_version: int, partitions: int, validate_only: bool = False) -> None:
        """Partitions the controller admitted for one topic of a CreateTopics & co. request."""
        span = self._space(ts)
        if span is not None:
            span.mutations.append(Mutation(broker, ts, charged_name(user), charged_name(client_id),
                                           api, api_version, partitions, validate_only))

    def flush(self) -> list[Span]:
        """The spans recorded since the last flush, oldest first; then forget them."""
        spans, self._spans, self._span, self.pending = self._spans, [], None, 0
        return spans
