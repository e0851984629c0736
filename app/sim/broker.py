"""A simulated broker: records contract events and obeys directives, as a broker embedding
`DirectiveSubscriber` would. Pure: time is passed in, directives come from any object with the
`ActiveSet` query methods (the live run passes a `DirectiveSubscriber`, tests an `ActiveSet`).

What the broker does with a directive (wire contract, docs/simulator.md):
- Produce/Fetch: `throttle_time_ms` from `request_throttle`; the response goes out at once with
  it and the channel is then muted until the throttle ends (KIP-219), so the next request on that
  connection is read no earlier. A throttled Fetch gets an empty response (0 bytes delivered).
- CreateTopics/DeleteTopics/CreatePartitions: a strict version (CreateTopics v>=6, DeleteTopics
  v>=5, CreatePartitions v>=3) under an active `reject` is answered THROTTLING_QUOTA_EXCEEDED and
  nothing is admitted; otherwise the partitions are admitted and any active throttle applies.
- New connections: a broker/listener `delay_connection` holds the listener's acceptor until it
  ends (later connections queue behind it), then the connection is accepted; an IP under
  `close_connection` has the connection closed. Only accepted connections are events.

Events are recorded by a `UsageRecorder` (the gateway's too) and leave in `flush()`, as the
spans the publisher sends as one record per event kind per flush interval (`app.usage`), with
requests of one (user, client id, api, listener, ip) pre-aggregated into one event with `count`
unless the scenario turns that off.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Collection, Protocol, Sequence

from app.engine.events import STRICT_SINCE
from app.gateway.local import LocalQuotas
from app.sim.meter import Meter
from app.sim.scenario import Listener
from app.subscriber.active_set import ConnectionDecision, MutationDecision, Throttle
from app.subscriber.directive import FETCH_QUOTAS, PRODUCE_QUOTAS
from app.usage.drops import Drops
from app.usage.recorder import CONNECTION, MUTATION, REQUEST, Span, UsageRecorder

__all__ = ["CONNECTION", "MUTATION", "REQUEST", "Acceptor", "Connection", "Directives", "SimBroker"]

#: Called with an outcome ("accepted", "delayed", "closed") and the time it happened.
Outcome = Callable[[str, float], None]
Schedule = Callable[[float, Any], None]


class Directives(Protocol):
    """The query side of `ActiveSet` / `DirectiveSubscriber`."""

    def request_throttle(self, user: str, client_id: str, now: int,
                         quotas: Collection[str] | None = None) -> Throttle: ...

    def mutation(self, user: str, client_id: str, now: int, strict: bool = True) -> MutationDecision: ...

    def connection(self, ip: str, listener: str, now: int,
                   protected_listener: bool = False) -> ConnectionDecision: ...


class Connection:
    """A client's connection to one broker, with the channel's mute state."""

    __slots__ = ("broker", "user", "client_id", "ip", "listener", "muted_until")

    def __init__(self, broker: SimBroker, user: str, client_id: str, ip: str, listener: str) -> None:
        self.broker = broker
        self.user = user
        self.client_id = client_id
        self.ip = ip
        self.listener = listener
        self.muted_until = 0.0


class Acceptor:
    """One listener's acceptor: connections are taken in arrival order; a delay holds it."""

    __slots__ = ("broker", "listener", "inter_broker", "protected", "queue", "busy")

    def __init__(self, broker: SimBroker, listener: Listener, protected: bool) -> None:
        self.broker = broker
        self.listener = listener.name
        self.inter_broker = listener.inter_broker
        self.protected = protected  # exempt from the broker-wide rate, as in Kafka
        self.queue: deque[list[Any]] = deque()  # [arrival, ip, on_outcome, delayed]
        self.busy = False  # a wake-up is scheduled (the acceptor is held)

    def act(self, t: float) -> float | None:
        broker = self.broker
        while self.queue:
            item = self.queue[0]
            _, ip, on_outcome, delayed = item
            now = int(t)
            decision = broker.directives.connection(ip, self.listener, now, self.protected)
            if not delayed and decision.delay_ms > 0:
                item[3] = True  # accepted once the hold ends, without a second delay
                self.busy = True
                return t + decision.delay_ms
            self.queue.popleft()
            if decision.close:
                outcome = "closed"
            else:
                outcome = "delayed" if delayed else "accepted"
                broker.usage.connection(broker.id, now, self.listener, ip, self.inter_broker)
            broker.meter.connection(broker.id, t, self.listener, ip,
                                    None if outcome == "accepted" else outcome)
            if on_outcome is not None:
                on_outcome(outcome, t)
        self.busy = False
        return None


class SimBroker:
    """One broker: its acceptors, the directives it obeys, the events it has not sent yet."""

    def __init__(self, broker_id: int, listeners: Sequence[Listener], directives: Directives,
                 meter: Meter, schedule: Schedule, aggregate: bool = True,
                 local: LocalQuotas | None = None, flush_ms: int = 100,
                 drops: Drops | None = None) -> None:
        """`local`: the broker's own quota managers (allocations), applied with the directives;
        `flush_ms`: how often its events are sent (the span of a record); `drops`: where the
        events it could not keep are counted."""
        self.id = broker_id
        self.directives = directives
        self.local = local
        self.meter = meter
        self.schedule = schedule
        protected = len(listeners) > 1
        self.acceptors = {lst.name: Acceptor(self, lst, protected and lst.inter_broker)
                          for lst in listeners}
        self.usage = UsageRecorder(aggregate, span_ms=flush_ms, drops=drops)

    def flush(self) -> list[Span]:
        """The events recorded since the last flush."""
        return self.usage.flush()

    # -- connections ---------------------------------------------------------------------------

    def connect(self, t: float, ip: str, listener: str, on_outcome: Outcome | None = None) -> None:
        """A new connection from `ip` arrives at `t`; `on_outcome` hears what became of it."""
        acceptor = self.acceptors[listener]
        acceptor.queue.append([t, ip, on_outcome, False])
        if not acceptor.busy:
            wake = acceptor.act(t)
            if wake is not None:
                self.schedule(wake, acceptor)

    def open(self, t: float, user: str, client_id: str, ip: str, listener: str) -> Connection:
        """A client's long-lived connection, opened at its start (accepted as any connection)."""
        self.connect(t, ip, listener)
        return Connection(self, user, client_id, ip, listener)

    # -- requests ------------------------------------------------------------------------------

    def request(self, conn: Connection, t: float, api: str, nbytes: int, thread_ms: float,
                network_ms: float) -> tuple[int, int]:
        """Handle a Produce or Fetch read at `t`; return (throttle_time_ms, bytes delivered)."""
        quotas = PRODUCE_QUOTAS if api == "Produce" else FETCH_QUOTAS
        now = int(t)
        throttle = self.directives.request_throttle(conn.user, conn.client_id, now, quotas).throttle_ms
        if api == "Fetch" and throttle > 0:
            nbytes = 0  # KafkaApis: a throttled fetch gets an empty response
        if self.local is not None:
            local = self.local.request(self.id, now, conn.listener, conn.user, conn.client_id,
                                       conn.ip, api, nbytes, thread_ms, False)
            if api == "Fetch" and local > 0:
                nbytes = 0
            throttle = max(throttle, local)
        self.usage.request(self.id, now, conn.listener, conn.user, conn.client_id, conn.ip, api,
                           nbytes, thread_ms, network_ms)
        self.meter.request(self.id, t, api, conn.user, conn.client_id, nbytes, thread_ms, throttle > 0)
        if throttle > 0:
            conn.muted_until = t + throttle
        return throttle, nbytes

    def mutate(self, conn: Connection, t: float, api: str, version: int, partitions: int,
               topics: int) -> tuple[bool, int]:
        """CreateTopics & co. read at `t`; return (rejected, throttle_time_ms)."""
        strict = version >= STRICT_SINCE[api]
        now = int(t)
        decision = self.directives.mutation(conn.user, conn.client_id, now, strict)
        if decision.reject:
            self.meter.mutation(self.id, t, conn.user, conn.client_id, 0, "rejected")
        else:
            for _ in range(topics):
                self.usage.mutation(self.id, now, conn.user, conn.client_id, api, version,
                                    partitions)
            self.meter.mutation(self.id, t, conn.user, conn.client_id, partitions * topics,
                                "throttled" if decision.throttle_ms > 0 else None)
        if decision.throttle_ms > 0:
            conn.muted_until = t + decision.throttle_ms
        return decision.reject, decision.throttle_ms
