"""New connections against the connection quotas (KIP-612), as a broker's acceptor takes them.

One listener's acceptor takes connections in arrival order. A `delay_connection` in force for the
broker or the listener (the larger of the directive's and the local rate's) holds the acceptor
until it ends, and every later connection waits behind it; then the connection at the head is
accepted without a second delay. An IP under `close_connection` has its connection closed (the
caller decides when: Kafka closes it once the IP's throttle ends). Only accepted connections are
events. A protected (inter-broker) listener is exempt from the broker-wide rate, as in Kafka.

`AcceptQueue` is the acceptor without its I/O: the gateway drives it from the event loop with a
timer per hold, the simulator from its scheduler. The local rates record a connection once, when
it first reaches the head of the queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from app.enforcement.sources import QuotaSources
from app.usage.recorder import UsageRecorder

C = TypeVar("C")


class ConnectionQuota:
    """The connection quotas of one enforcer: what to do with a new connection, and its event."""

    __slots__ = ("sources", "usage")

    def __init__(self, sources: QuotaSources, usage: UsageRecorder) -> None:
        self.sources = sources
        self.usage = usage

    def first(self, broker: int, now: int, listener: str, ip: str, protected: bool = False,
              inter_broker: bool = False) -> tuple[int, int, int]:
        """A connection's first decision, recorded by the local rates: (delay_ms for the
        acceptor, close_ms for the IP, the local rates' share of that close_ms)."""
        directive = self.sources.directives.connection(ip, listener, now, protected, broker)
        local = self.sources.local
        delay, local_close = (0, 0) if local is None else local.connection(
            broker, now, listener, ip, inter_broker)
        return max(directive.delay_ms, delay), max(directive.close_ms, local_close), local_close

    def after_hold(self, broker: int, now: int, listener: str, ip: str, protected: bool,
                   local_close: int) -> int:
        """close_ms of a connection the acceptor held for a delay, now that the hold is over:
        the directives are asked again, the local rates are not (they recorded it already)."""
        directive = self.sources.directives.connection(ip, listener, now, protected, broker)
        return max(directive.close_ms, local_close)

    def accepted(self, broker: int, now: int, listener: str, ip: str,
                 inter_broker: bool = False) -> None:
        """The event of an accepted connection."""
        self.usage.connection(broker, now, listener, ip, inter_broker)


@dataclass(slots=True)
class Arrival(Generic[C]):
    """A connection waiting in an acceptor: what the caller queued with its IP."""

    conn: C
    ip: str
    judged: bool = False  # its first decision is made (recorded by the local rates)
    delayed: bool = False  # it held the acceptor for a delay
    local_close: int = 0


class Step(NamedTuple, Generic[C]):
    """What the acceptor does next: hold for `hold_ms` (no `arrival`), or take `arrival` off the
    queue, closing it (`close_ms` > 0: after that long) or accepting it."""

    arrival: Arrival[C] | None
    hold_ms: int
    close_ms: int


class AcceptQueue(Generic[C]):
    """One listener's acceptor on one broker: connections in arrival order."""

    __slots__ = ("broker", "gone", "held", "inter_broker", "listener", "protected", "queue",
                 "quota")

    def __init__(self, quota: ConnectionQuota, broker: int, listener: str, protected: bool = False,
                 inter_broker: bool = False, gone: Callable[[C], bool] | None = None) -> None:
        """`protected`: exempt from the broker-wide rate; `gone`: whether a queued connection
        went away meanwhile (passed over, never decided)."""
        self.quota = quota
        self.broker = broker
        self.listener = listener
        self.protected = protected
        self.inter_broker = inter_broker
        self.gone = gone
        self.queue: deque[Arrival[C]] = deque()
        self.held = False  # a hold is in force: the caller runs `step` again when it ends

    def __len__(self) -> int:
        return len(self.queue)

    def arrive(self, conn: C, ip: str) -> bool:
        """Queue a new connection; True if the caller should run the acceptor now (no hold)."""
        self.queue.append(Arrival(conn, ip))
        return not self.held

    def step(self, now: int) -> Step[C] | None:
        """The acceptor's next step at `now` (epoch ms); None once the queue is empty."""
        self.held = False
        queue, quota = self.queue, self.quota
        while queue:
            arrival = queue[0]
            if self.gone is not None and self.gone(arrival.conn):
                queue.popleft()
                continue
            if arrival.judged:
                close = quota.after_hold(self.broker, now, self.listener, arrival.ip,
                                         self.protected, arrival.local_close)
            else:
                arrival.judged = True
                delay, close, arrival.local_close = quota.first(
                    self.broker, now, self.listener, arrival.ip, self.protected, self.inter_broker)
                if delay > 0:
                    arrival.delayed = self.held = True
                    return Step(None, delay, 0)
            queue.popleft()
            if close <= 0:
                quota.accepted(self.broker, now, self.listener, arrival.ip, self.inter_broker)
            return Step(arrival, 0, close)
        return None
