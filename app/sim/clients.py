"""Simulated clients. Each is a set of actors the `World` wakes at the times they ask for.

- producer / consumer: paced at `rate` bytes/s, spread evenly over their brokers; they honour
  `throttle_time_ms` (wait that long before the next request on that connection).
- greedy-producer / greedy-consumer: one connection per broker, each sending back to back at the
  client's own capacity (`rate` / brokers); they honour `throttle_time_ms`.
- ignoring-producer / ignoring-consumer: greedy, and ignore `throttle_time_ms`: they send again
  at once, and only the broker's muted channel holds the request back until the throttle ends.
- connection-storm: new connections at `rate`/s, round-robin over its IPs (`ips`) and brokers.
- topic-storm: CreateTopics (or `api`) requests at `rate`/s with `api_version` deciding strict
  (THROTTLING_QUOTA_EXCEEDED) or legacy (throttled) handling; honours `throttle_time_ms`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from app.sim.broker import Connection, SimBroker
from app.sim.scenario import CONSUMER_KINDS, ClientSpec


class Actor(Protocol):
    """What the world wakes: `act(t)` does what is due at `t` and says when to wake it next."""

    def act(self, t: float) -> float | None: ...


class Stage(Protocol):
    """What a client needs of the world it runs in (`app.sim.world.World`)."""

    @property
    def start_ms(self) -> float: ...

    @property
    def brokers(self) -> Mapping[int, SimBroker]: ...

    def schedule(self, t: float, actor: Actor) -> None: ...


@dataclass
class ClientStats:
    """What one client experienced (the "never throttled" and outcome checks read these)."""

    requests: int = 0
    bytes: int = 0
    throttled: int = 0
    throttle_ms: int = 0
    max_throttle_ms: int = 0
    held_ms: float = 0.0  # time requests sat in a muted channel (clients ignoring throttles)
    rejected: int = 0
    admitted: int = 0  # partitions
    attempts: int = 0
    accepted: int = 0
    delayed: int = 0
    closed: int = 0
    #: bytes done per whole second of the run (the summary's phases)
    by_second: dict[int, int] = field(default_factory=dict)

    def done(self, second: int, nbytes: int) -> None:
        self.bytes += nbytes
        self.by_second[second] = self.by_second.get(second, 0) + nbytes

    def rate(self, start_s: float, end_s: float) -> float:
        """Bytes per second done over the whole seconds in [start_s, end_s)."""
        first, last = math.ceil(start_s), math.floor(end_s)
        if last <= first:
            return 0.0
        return sum(self.by_second.get(s, 0) for s in range(first, last)) / (last - first)

    def throttle(self, ms: int) -> None:
        if ms > 0:
            self.throttled += 1
            self.throttle_ms += ms
            self.max_throttle_ms = max(self.max_throttle_ms, ms)

    def connection(self, outcome: str, t: float) -> None:
        if outcome == "closed":
            self.closed += 1
        else:
            self.accepted += 1
            self.delayed += outcome == "delayed"


class Client:
    """Starts its actors at `start`; they stop scheduling themselves at `stop`."""

    def __init__(self, spec: ClientSpec, world: Stage) -> None:
        self.spec = spec
        self.world = world
        self.stats = ClientStats()
        self.stop_ms = float("inf") if spec.stop is None else world.start_ms + spec.stop * 1000.0

    def act(self, t: float) -> None:
        spec, world = self.spec, self.world
        brokers = [world.brokers[b] for b in spec.brokers]
        if spec.kind == "connection-storm":
            world.schedule(t, StormActor(self, brokers))
            return None
        conns = [b.open(t, spec.user, spec.client_id, spec.ip, spec.listener) for b in brokers]
        if spec.kind == "topic-storm":
            world.schedule(t, TopicStormActor(self, conns))
            return None
        per_conn = spec.rate / len(conns)
        gap_ms = spec.request_bytes / per_conn * 1000.0
        for i, conn in enumerate(conns):
            world.schedule(t + gap_ms * i / len(conns), RequestActor(self, conn, gap_ms))
        return None


class RequestActor:
    """One connection of a producer or consumer: a request, its response, the next one."""

    __slots__ = ("client", "conn", "gap_ms", "api", "honours", "held_since")

    def __init__(self, client: Client, conn: Connection, gap_ms: float) -> None:
        self.client = client
        self.conn = conn
        self.gap_ms = gap_ms  # paced: the interval; greedy: the time to send one request
        self.api = "Fetch" if client.spec.kind in CONSUMER_KINDS else "Produce"
        self.honours = client.spec.honours_throttle
        self.held_since: float | None = None

    def act(self, t: float) -> float | None:
        client, conn = self.client, self.conn
        if t >= client.stop_ms:
            return None
        if conn.muted_until > t:  # sent into a muted channel: read when the mute ends
            if self.held_since is None:
                self.held_since = t
            return conn.muted_until
        stats, spec = client.stats, client.spec
        if self.held_since is not None:
            stats.held_ms += t - self.held_since
            self.held_since = None
        throttle, delivered = conn.broker.request(conn, t, self.api, spec.request_bytes,
                                                  spec.thread_ms, spec.network_ms)
        stats.requests += 1
        stats.done(int((t - client.world.start_ms) // 1000), delivered)
        stats.throttle(throttle)
        nxt = t + self.gap_ms
        if self.honours and t + throttle > nxt:
            nxt = t + throttle
        return nxt


class StormActor:
    """New connections at a fixed rate, round-robin over IPs and brokers; fire and forget."""

    __slots__ = ("client", "brokers", "ips", "gap_ms", "n")

    def __init__(self, client: Client, brokers: list[SimBroker]) -> None:
        self.client = client
        self.brokers = brokers
        self.ips = client.spec.addresses
        self.gap_ms = 1000.0 / client.spec.rate
        self.n = 0

    def act(self, t: float) -> float | None:
        client = self.client
        if t >= client.stop_ms:
            return None
        n = self.n
        self.n += 1
        broker = self.brokers[n % len(self.brokers)]
        client.stats.attempts += 1
        broker.connect(t, self.ips[n % len(self.ips)], client.spec.listener, client.stats.connection)
        return t + self.gap_ms


class TopicStormActor:
    """Admin requests at a fixed rate, round-robin over brokers; honours throttle_time_ms."""

    __slots__ = ("client", "conns", "gap_ms", "n")

    def __init__(self, client: Client, conns: list[Connection]) -> None:
        self.client = client
        self.conns = conns
        self.gap_ms = 1000.0 / client.spec.rate
        self.n = 0

    def act(self, t: float) -> float | None:
        client = self.client
        if t >= client.stop_ms:
            return None
        conn = self.conns[self.n % len(self.conns)]
        if conn.muted_until > t:
            return conn.muted_until
        self.n += 1
        spec, stats = client.spec, client.stats
        rejected, throttle = conn.broker.mutate(conn, t, spec.api, spec.api_version,
                                                spec.partitions, spec.topics_per_request)
        stats.requests += 1
        stats.throttle(throttle)
        if rejected:
            stats.rejected += 1
        stats.admitted += spec.partitions * (spec.topics_per_request - rejected)
        return max(t + self.gap_ms, t + throttle)
