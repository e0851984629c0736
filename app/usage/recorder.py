"""`UsageRecorder`: the contract events a broker-side component records between two flushes.

Pure (no clock, no I/O): callers pass each event's time. `flush()` hands back one `batch` record
per (event kind, contract key, broker), events in the order they were recorded, and forgets them.
Keys are the contract's: canonical JSON of `{"user", "client_id"}` for request and mutation
events, of `{"ip"}` for connection events (what `quota-streams produce` writes).

With `aggregate`, the requests of one (broker, user, client id, api, version, listener, ip,
exempt) within a flush become one event with `count` > 1 and summed amounts, at the time of the
last one: what a busy broker sends instead of one event per request (the contract's `count`).
Broker scope stays exact per event only without it.

`gateway` names the gateway instance recording (`--gateway-id`): its request events carry it, so
allocations are divided among gateways (`RequestEvent.enforcer`).

`max_pending` bounds memory while the events cannot be sent (a broker down): past it, new events
are dropped and counted in `dropped`, never queued without end.
"""

from __future__ import annotations

from typing import Any, Callable

from app.admin.config_topic import canonical_json

REQUEST, CONNECTION, MUTATION = "request", "connection", "mutation"
KINDS = (REQUEST, CONNECTION, MUTATION)

#: One batch record: (event kind, contract key, the `{"type": "batch", ...}` record).
Batch = tuple[str, bytes, dict[str, Any]]

_AggKey = tuple[int, str, str, str, int, str, str, bool]


class UsageRecorder:
    """Events recorded since the last `flush()`, grouped by (kind, key, broker)."""

    def __init__(self, aggregate: bool = False, max_pending: int = 1_000_000,
                 on_first: Callable[[], None] | None = None, gateway: int | None = None) -> None:
        """`on_first` is called when an event is recorded while none is pending: a publisher
        can sleep until there is something to send."""
        self.aggregate = aggregate
        self.gateway = gateway
        self.max_pending = max_pending
        self.on_first = on_first
        self.pending = 0
        self.recorded = 0
        self.dropped = 0
        self._groups: dict[tuple[str, bytes, int], list[dict[str, Any]]] = {}
        self._agg: dict[_AggKey, dict[str, Any]] = {}
        self._keys: dict[tuple[str, str], bytes] = {}

    def _client_key(self, user: str, client_id: str) -> bytes:
        key = self._keys.get((user, client_id))
        if key is None:
            if len(self._keys) >= 100_000:  # principals come and go: keep the cache bounded
                self._keys.clear()
            key = self._keys[(user, client_id)] = canonical_json(
                {"user": user, "client_id": client_id})
        return key

    def _add(self, kind: str, key: bytes, broker: int, event: dict[str, Any]) -> bool:
        if self.pending >= self.max_pending:
            self.dropped += 1
            return False
        if not self.pending and self.on_first is not None:
            self.on_first()
        group = self._groups.get((kind, key, broker))
        if group is None:
            group = self._groups[(kind, key, broker)] = []
        group.append(event)
        self.pending += 1
        self.recorded += 1
        return True

    def request(self, broker: int, ts: int, listener: str, user: str, client_id: str, ip: str,
                api: str, api_version: int, nbytes: int, thread_ms: float, network_ms: float,
                exempt: bool = False) -> None:
        """One request: `nbytes` (Produce request / Fetch response size), thread and network time."""
        agg_key: _AggKey | None = None
        if self.aggregate:
            agg_key = (broker, user, client_id, api, api_version, listener, ip, exempt)
            event = self._agg.get(agg_key)
            if event is not None:
                event["ts"] = ts
                event["bytes"] += nbytes
                event["thread_time_ms"] += thread_ms
                event["network_time_ms"] += network_ms
                event["count"] += 1
                self.recorded += 1
                return
        event = {"type": REQUEST, "v": 1, "ts": ts, "listener": listener, "user": user,
                 "client_id": client_id, "ip": ip, "api": api, "api_version": api_version,
                 "bytes": nbytes, "thread_time_ms": thread_ms, "network_time_ms": network_ms,
                 "exempt": exempt, "count": 1}
        if self.gateway is not None:
            event["gateway"] = self.gateway
        if self._add(REQUEST, self._client_key(user, client_id), broker, event) and agg_key:
            self._agg[agg_key] = event

    def connection(self, broker: int, ts: int, listener: str, ip: str,
                   inter_broker: bool = False) -> None:
        """One accepted connection."""
        self._add(CONNECTION, canonical_json({"ip": ip}), broker, {
            "type": CONNECTION, "v": 1, "ts": ts, "listener": listener, "ip": ip,
            "inter_broker": inter_broker})

    def mutation(self, broker: int, ts: int, user: str, client_id: str, api: str,
                 api_version: int, partitions: int, validate_only: bool = False) -> None:
        """Partitions the controller admitted for one topic of a CreateTopics & co. request."""
        self._add(MUTATION, self._client_key(user, client_id), broker, {
            "type": MUTATION, "v": 1, "ts": ts, "user": user, "client_id": client_id, "api": api,
            "api_version": api_version, "partitions": partitions, "validate_only": validate_only})

    def flush(self) -> list[Batch]:
        """The batch records recorded since the last flush, and forget them."""
        groups, self._groups, self._agg, self.pending = self._groups, {}, {}, 0
        return [(kind, key, {"type": "batch", "v": 1, "broker": broker, "events": events})
                for (kind, key, broker), events in groups.items()]
