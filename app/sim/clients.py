"""Simulated clients. Each is a set of actors the `World` wakes at the times they ask for.

- producer / consumer: paced at `rate` bytes/s, spread evenly over their brokers; they honour
  `throttle_time_ms` (wait that long before the next request on that connection).
- greedy-producer / greedy-consumer: one connection per broker, each sending back to back at the
  client's own capacity (`rate` / brokers); they honour `throttle_time_ms`.
- ignoring-producer / ignoring-consumer: greedy, and ignore `throttle_time_ms`: they send again
  at once, and only the broker's muted channel holds the request back until the throttle ends.
- buffered-producer: a librdkafka producer with its defaults (`BufferedProducer`): records
  offered at `rate` over partitions led by `leaders`, one buffer for all of them, requests as
  large as what waits for a broker (up to `request_bytes`), `throttle_time_ms` ignored, a
  request unanswered for `timeout_ms` sent again on a new connection.
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
    #: requests a buffered-producer sent again on a new connection after `timeout_ms`
    timeouts: int = 0
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
        if spec.kind == "buffered-producer":
            BufferedProducer(self, t)
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


#: librdkafka's linger.ms, and a request's round trip on loopback
LINGER_MS = 5.0
RTT_MS = 1.0


class BufferedProducer:
    """A producer with librdkafka's defaults: one buffer, a connection per leader.

    Records are offered at `rate`, spread evenly over the partitions (`leaders`: each one's
    broker; `moved_leaders` from `moved_at` on, the bytes waiting for a partition following
    it) and taken while the buffer holds less than `window` bytes (past it, the program
    offering them waits and the offer is lost). Each connection sends what waits for its
    broker as one request of at most `request_bytes` as soon as the last one was answered,
    `LINGER_MS` after the first byte waited: so requests are small while the brokers keep up
    and as large as `request_bytes` once a backlog builds. librdkafka ignores
    `throttle_time_ms` (KIP-219 unsupported): the broker's muted channel holds the next
    request until the mute ends, and a request left unanswered for `timeout_ms`
    (socket.timeout.ms) makes the client drop the connection and send it again at once on a
    new one, which no mute holds.
    """

    __slots__ = ("client", "leaders", "move_ms", "waiting", "offered_at", "buffered", "lines")

    def __init__(self, client: Client, t: float) -> None:
        self.client = client
        spec = client.spec
        self.leaders = list(spec.leaders)
        self.move_ms = (float("inf") if spec.moved_at is None
                        else client.world.start_ms + spec.moved_at * 1000.0)
        self.waiting = [0.0] * len(self.leaders)  # bytes waiting for each partition
        self.buffered = 0.0
        self.offered_at = t
        self.lines: dict[int, ProducerLine] = {}
        for b in dict.fromkeys(self.leaders):
            self._line(b, t)

    def _line(self, broker: int, t: float) -> None:
        spec, world = self.client.spec, self.client.world
        line = self.lines[broker] = ProducerLine(self, world.brokers[broker].open(
            t, spec.user, spec.client_id, spec.ip, spec.listener))
        world.schedule(t, line)

    def offer(self, t: float) -> None:
        """Take what was offered since the last call, while the buffer has room; move the
        partitions' leadership when its time came."""
        spec = self.client.spec
        if t >= self.move_ms:
            self.move_ms = float("inf")
            self.leaders = list(spec.moved_leaders)
            for b in dict.fromkeys(self.leaders):
                if b not in self.lines:
                    self._line(b, t)
        room = spec.window - self.buffered
        offered = min(spec.rate * (t - self.offered_at) / 1000.0, max(room, 0.0))
        self.offered_at = t
        if offered <= 0.0:
            return
        self.buffered += offered
        each = offered / len(self.waiting)
        for p in range(len(self.waiting)):
            self.waiting[p] += each

    def waiting_for(self, broker: int) -> float:
        return sum(w for w, b in zip(self.waiting, self.leaders) if b == broker)

    def take(self, broker: int, most: int) -> int:
        """Up to `most` bytes waiting for `broker`'s partitions, as one request."""
        taken = 0.0
        for p, b in enumerate(self.leaders):
            if b == broker and taken < most:
                part = min(self.waiting[p], most - taken)
                self.waiting[p] -= part
                taken += part
        self.buffered -= taken
        return int(taken)


class ProducerLine:
    """One connection of a `BufferedProducer`: its requests to one broker, in turn."""

    __slots__ = ("producer", "conn", "since", "sent_at")

    def __init__(self, producer: BufferedProducer, conn: Connection) -> None:
        self.producer = producer
        self.conn = conn
        self.since: float | None = None  # when the bytes waiting for it started to wait
        self.sent_at: float | None = None  # a request sent, held by the broker's mute

    def act(self, t: float) -> float | None:
        producer = self.producer
        client = producer.client
        if t >= client.stop_ms:
            return None
        producer.offer(t)
        conn = self.conn
        spec = client.spec
        if self.sent_at is not None:  # a request waits in a muted channel
            if t < conn.muted_until and t - self.sent_at < spec.timeout_ms:
                return min(conn.muted_until, self.sent_at + spec.timeout_ms)
            if t < conn.muted_until:  # timed out: a new connection, which no mute holds
                client.stats.timeouts += 1
                self.conn = conn = conn.broker.open(t, spec.user, spec.client_id, spec.ip,
                                                    spec.listener)
            self.sent_at = None
            return self._send(t)
        waiting = producer.waiting_for(conn.broker.id)
        if waiting < 1.0:
            self.since = None
            return t + LINGER_MS
        if self.since is None:
            self.since = t
        if t - self.since < LINGER_MS and waiting < spec.request_bytes:
            return self.since + LINGER_MS
        if t < conn.muted_until:
            self.sent_at = t
            return min(conn.muted_until, t + spec.timeout_ms)
        return self._send(t)

    def _send(self, t: float) -> float:
        producer, conn = self.producer, self.conn
        client = producer.client
        spec = client.spec
        nbytes = producer.take(conn.broker.id, spec.request_bytes)
        self.since = None
        if nbytes < 1:
            return t + LINGER_MS
        throttle, delivered = conn.broker.request(conn, t, "Produce", nbytes, spec.thread_ms,
                                                  spec.network_ms)
        stats = client.stats
        stats.requests += 1
        stats.done(int((t - client.world.start_ms) // 1000), delivered)
        stats.throttle(throttle)
        return t + RTT_MS
