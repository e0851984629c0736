"""A simulated broker: records contract events and obeys directives, as a broker embedding
`DirectiveSubscriber` would. Pure: time is passed in, directives come from any object with the
`ActiveSet` query methods (the live run passes a `DirectiveSubscriber`, tests an `ActiveSet`).

What it decides is the gateway's code (`app.enforcement`): the request throttle, the controller
mutation quota topic by topic (strict versions rejected THROTTLING_QUOTA_EXCEEDED, permissive
ones throttled), the connection quotas in each listener's acceptor, and which events are
recorded; with `local` quota managers (allocations), those are charged as the gateway charges
its own. What is the simulator's own is the model around it:
- Produce/Fetch: the response goes out at once with `throttle_time_ms` and the channel is then
  muted until the throttle ends (KIP-219), so the next request on that connection is read no
  earlier. A throttled Fetch delivers 0 bytes.
- Mutations: the channel is muted for the response's throttle.
- New connections: a hold of the acceptor is a wake-up on the world's scheduler; a closed
  connection is closed at once.

Events are recorded by a `UsageRecorder` (the gateway's too) and leave in `flush()`, as the
spans the publisher sends as one record per event kind per flush interval (`app.usage`), with
requests of one (user, client id, api, listener, ip) pre-aggregated into one event with `count`
unless the scenario turns that off.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.engine.configs import FETCH
from app.enforcement.connections import AcceptQueue, ConnectionQuota
from app.enforcement.local import LocalQuotas
from app.enforcement.mutations import MutationQuota
from app.enforcement.requests import RequestQuota
from app.enforcement.sources import Directives, QuotaSources
from app.sim.meter import Meter
from app.sim.scenario import Listener
from app.usage.drops import Drops
from app.usage.recorder import CONNECTION, MUTATION, REQUEST, Span, UsageRecorder

__all__ = ["CONNECTION", "MUTATION", "REQUEST", "Acceptor", "Connection", "Directives", "SimBroker"]

#: Called with an outcome ("accepted", "delayed", "closed") and the time it happened.
Outcome = Callable[[str, float], None]
Schedule = Callable[[float, Any], None]


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
    """One listener's acceptor (`AcceptQueue`) on the world's scheduler; each connection's
    outcome goes to the meter and to whoever asked."""

    __slots__ = ("broker", "queue")

    def __init__(self, broker: SimBroker, listener: Listener, protected: bool) -> None:
        self.broker = broker
        # a protected listener is exempt from the broker-wide rate, as in Kafka
        self.queue: AcceptQueue[Outcome | None] = AcceptQueue(
            broker.connections, broker.id, listener.name, protected, listener.inter_broker)

    def act(self, t: float) -> float | None:
        broker, queue = self.broker, self.queue
        while (step := queue.step(int(t))) is not None:
            arrival = step.arrival
            if arrival is None:
                return t + step.hold_ms
            outcome = "closed" if step.close_ms > 0 else \
                "delayed" if arrival.delayed else "accepted"
            broker.meter.connection(broker.id, t, queue.listener, arrival.ip,
                                    None if outcome == "accepted" else outcome)
            notify = arrival.conn  # what `connect` queued: who hears the outcome
            if notify is not None:
                notify(outcome, t)
        return None


class SimBroker:
    """One broker: its acceptors, the directives it obeys, the events it has not sent yet."""

    def __init__(self, broker_id: int, listeners: Sequence[Listener], directives: Directives,
                 meter: Meter, schedule: Schedule, aggregate: bool = True,
                 local: LocalQuotas | None = None, flush_ms: int = 100,
                 drops: Drops | None = None, per_second: bool = False) -> None:
        """`local`: the broker's own quota managers (allocations), applied with the directives;
        `flush_ms`: how often its events are sent (the span of a record); `drops`: where the
        events it could not keep are counted; `per_second`: its requests are reported as the
        broker plugin reports them, one event per principal and second, stamped with the
        second."""
        self.id = broker_id
        self.per_second = per_second
        self.local = local
        self.meter = meter
        self.schedule = schedule
        self.usage = UsageRecorder(aggregate, span_ms=flush_ms, drops=drops)
        quotas = QuotaSources(directives, local)
        self.connections = ConnectionQuota(quotas, self.usage)
        self.requests = RequestQuota(quotas)
        self.mutations = MutationQuota(quotas, self.usage)
        protected = len(listeners) > 1
        self.acceptors = {lst.name: Acceptor(self, lst, protected and lst.inter_broker)
                          for lst in listeners}

    def flush(self) -> list[Span]:
        """The events recorded since the last flush."""
        return self.usage.flush()

    # -- connections ---------------------------------------------------------------------------

    def connect(self, t: float, ip: str, listener: str, on_outcome: Outcome | None = None) -> None:
        """A new connection from `ip` arrives at `t`; `on_outcome` hears what became of it."""
        acceptor = self.acceptors[listener]
        if acceptor.queue.arrive(on_outcome, ip):
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
        now = int(t)
        fetch = api == "Fetch"
        if fetch and self.per_second and self.local is not None:
            # Kafka caps a consumer's fetch at what its quota window holds at its bound
            held = self.local.engine.allowance(FETCH, self.id, conn.user, conn.client_id)
            if held is not None:
                nbytes = min(nbytes, int(held))
        throttle, empty = self.requests.throttle(self.id, now, conn.listener, conn.user,
                                                 conn.client_id, conn.ip, api, nbytes, thread_ms,
                                                 fetch)
        if empty:
            nbytes = 0  # KafkaApis: a throttled fetch gets an empty response
        # the plugin reads Kafka's sensors just after each second and stamps what they gained
        # with the second that ended
        stamp = (now - 1) // 1000 * 1000 if self.per_second else now
        self.usage.request(self.id, stamp, conn.listener, conn.user, conn.client_id, conn.ip, api,
                           nbytes, thread_ms, network_ms, throttle_ms=throttle)
        self.meter.request(self.id, t, api, conn.user, conn.client_id, nbytes, thread_ms, throttle > 0)
        if throttle > 0:
            conn.muted_until = t + throttle
        return throttle, nbytes

    def mutate(self, conn: Connection, t: float, api: str, version: int, partitions: int,
               topics: int) -> tuple[int, int]:
        """CreateTopics & co. of `topics` topics of `partitions` each, read at `t`; return (the
        topics rejected THROTTLING_QUOTA_EXCEEDED, throttle_time_ms)."""
        now = int(t)
        plan = self.mutations.plan(self.id, now, conn.user, conn.client_id, api, version,
                                   [partitions] * topics)
        admitted = topics - len(plan.rejected)
        self.mutations.admitted(self.id, now, conn.user, conn.client_id, api, version,
                                [partitions] * admitted)
        if plan.rejected:
            self.meter.mutation(self.id, t, conn.user, conn.client_id, 0, "rejected")
        if admitted:
            self.meter.mutation(self.id, t, conn.user, conn.client_id, partitions * admitted,
                                "throttled" if plan.throttle_ms > 0 else None)
        throttle = plan.response_ms()
        if throttle > 0:
            conn.muted_until = t + throttle
        return len(plan.rejected), throttle
