"""The gateway process: its listeners, connection admission, the directives it obeys and the usage
events it publishes.

Start-up: probe the cluster (ApiVersions and Metadata on `--upstream`) to learn its brokers and
the versions it speaks. A SASL listener (`upstream_sasl`) answers nothing but ApiVersions and SASL
before a connection authenticates, so there the probe asks ApiVersions only; the port rule's
first node id and the bootstrap broker come from the flags or, left out, from the first answer
naming brokers after a client authenticated (`Session` asks for one on its own connection, the
client's principal, never shown to the client). Until then bootstrap connections are admitted
with no broker named, and their connection is charged once it is known (`place`). Then rebuild the directives from the control topic (bounded by
`directives_timeout`: the gateway serves without them rather than not at all, and says so);
open the event producer; listen on the bootstrap port and one port per broker (`nodes.PortRule`).
A broker that appears later (in a Metadata or DescribeCluster response) gets its port before the
response that names it reaches the client.

Admission (KIP-612, per broker port, as a broker's acceptor): a `delay_connection` in force for
the broker or listener holds this port's acceptor for its throttle (later connections queue
behind it, at most `max_queued_connections`: the newest past that is closed), then the
connection is accepted; an IP under `close_connection` gets its socket held, unread, and closed
when the throttle ends, never reaching a broker. Only accepted connections are events. Before
any of that, a connection over the gateway's caps (`max_connections` in all, and per IP) is
closed at once; every open one counts, admitted or not. Behind a load balancer speaking the
PROXY protocol (`proxy_protocol`), the client's address is the one its header names: the
connection counts in the total from its first byte, and is judged per IP (caps, quotas,
events) once the header is read. A sweep closes idle connections and those whose broker left a
request unanswered (`limits.Limits`).

When the control topic cannot be read, the directives already known stay in force until their
`until`, and nothing new is learned: the gateway fails open, as a broker without the quota
processor would. When the event topics cannot be written, usage is kept up to `max_pending`
events, then dropped and counted (`quota_streams_gateway_events_dropped_total{reason}`, with the
records the producer failed on); requests are never held back for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.enforcement.connections import AcceptQueue, ConnectionQuota
from app.enforcement.local import LocalQuotas
from app.enforcement.mutations import MutationQuota
from app.enforcement.requests import RequestQuota
from app.enforcement.sources import Directives, QuotaSources
from app.errors import reason
from app.gateway import messages
from app.gateway.connection import Session
from app.gateway.frames import SIZE, ReadBuffers, frame
from app.gateway.config import Address, GatewayConfig
from app.gateway.limits import ConnectionCounts
from app.gateway.messages import MessageError, Node
from app.gateway.metrics import GatewayMetrics
from app.gateway.nodes import NodeMap, PortRule
from app.kafka.supervision import Supervised, Supervision
from app.subscriber.allocations import AllocatedLimits
from app.usage.drops import Drops
from app.usage.publisher import EventPublisher, Source
from app.usage.recorder import UsageRecorder
from app.usage.records import RecordEncoder

if TYPE_CHECKING:
    from app.kafka.config_follower import ConfigFollower

logger = logging.getLogger(__name__)

class GatewayError(RuntimeError):
    """The gateway cannot start; the message says what to do."""


#: The node of a bootstrap connection accepted before the gateway knew which broker is there.
UNKNOWN_NODE = -1


@dataclass
class ClusterInfo:
    """What the start-up probe learned (no nodes in front of a SASL listener)."""

    nodes: list[Node]
    versions: dict[int, tuple[int, int]]
    answered_by: Address


async def probe_cluster(upstream: tuple[Address, ...], tls: ssl.SSLContext | None,
                        timeout: float, sasl: bool = False) -> ClusterInfo:
    """ApiVersions, then Metadata (no topics), on the first upstream address that answers;
    ApiVersions only with `sasl` (a SASL listener refuses Metadata before authentication)."""
    reasons = []
    for host, port in upstream:
        try:
            async with asyncio.timeout(timeout):
                return await _probe_one(host, port, tls, sasl)
        except (OSError, TimeoutError, MessageError, struct.error, asyncio.IncompleteReadError) as exc:
            reasons.append(f"{host}:{port}: {reason(exc)}")
    raise GatewayError("cannot reach the upstream cluster (" + "; ".join(reasons) + "); check "
                       "--upstream (and its TLS settings)")


async def _probe_one(host: str, port: int, tls: ssl.SSLContext | None, sasl: bool) -> ClusterInfo:
    reader, writer = await asyncio.open_connection(host, port, ssl=tls)
    try:
        client_id = b"quota-streams-gateway"
        writer.write(SIZE.pack(10 + len(client_id)) + struct.pack(">hhih", 18, 0, 1, len(client_id))
                     + client_id)
        versions = messages.api_version_ranges(await _read_frame(reader), 0)
        if 3 not in versions:
            raise MessageError("the upstream does not offer Metadata")
        if sasl:
            return ClusterInfo([], versions, (host, port))
        version = min(versions[3][1], 12)
        writer.write(frame(messages.metadata_request(version, 2, client_id.decode(), [])))
        try:
            payload = await _read_frame(reader)
        except asyncio.IncompleteReadError:  # what a SASL listener does before authentication
            raise MessageError("it answered ApiVersions, then closed on Metadata: a SASL "
                               "listener? then give --upstream-sasl") from None
        nodes, _start, _end = messages.metadata_brokers(payload, version)
        if not nodes:
            raise MessageError("the upstream answered Metadata without brokers (does it require "
                               "SASL? then give --upstream-sasl)")
        return ClusterInfo(nodes, versions, (host, port))
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = SIZE.unpack(await reader.readexactly(4))
    if not 0 <= size <= 64 * 1024 * 1024:
        raise MessageError(f"not a Kafka answer (frame size {size})")
    return await reader.readexactly(size)


class Acceptor:
    """One broker port's acceptor (`AcceptQueue`) on the event loop: a hold is a timer, a closed
    IP's socket is held, unread, until its throttle ends."""

    __slots__ = ("gateway", "queue")

    def __init__(self, gateway: Gateway, node_id: int) -> None:
        self.gateway = gateway
        self.queue: AcceptQueue[Session] = AcceptQueue(gateway.connection_quota, node_id,
                                                       gateway.listener, gone=_gone)

    def arrive(self, session: Session) -> None:
        if len(self.queue) >= self.gateway.limits.max_queued_connections:
            self.gateway.metrics.connection("queue_full")
            session.close()
            return
        if self.queue.arrive(session, session.ip):
            self.run()

    def run(self) -> None:
        gw = self.gateway
        while (step := self.queue.step(gw.now_ms())) is not None:
            if step.arrival is None:
                gw.metrics.connection("delayed")
                asyncio.get_running_loop().call_later(step.hold_ms / 1000.0, self.run)
                return
            session = step.arrival.conn
            if step.close_ms > 0:  # Kafka closes an IP-throttled connection when its throttle ends
                gw.metrics.connection("closed")
                asyncio.get_running_loop().call_later(step.close_ms / 1000.0, session.close)
                continue
            gw.metrics.connection("accepted")
            session.admitted()


def _gone(session: Session) -> bool:
    return session.closed


class Gateway:
    """One gateway instance: what every `Session` shares."""

    def __init__(self, config: GatewayConfig, directives: Directives | None = None,
                 local: LocalQuotas | None = None) -> None:
        self.config = config
        #: seconds, monotonic: connection timings (idle, service time, the latency it adds)
        self.clock: Callable[[], float] = time.perf_counter
        self.local = local if local is not None or config.local is None else LocalQuotas(
            config.local, gateway=-1 if config.gateway_id is None else config.gateway_id)
        self._follower: Any = None
        self.listener = config.listener
        #: what every session's frame readers read into
        self.read_buffers = ReadBuffers()
        self.max_in_flight = config.max_in_flight
        self.limits = config.limits
        self.metrics = GatewayMetrics()
        #: client bytes held by all sessions, summed by each sweep (a scrape must not walk
        #: thousands of sessions)
        self.buffered = 0
        self.metrics.buffered.set_function(lambda: self.buffered)
        self.muted = 0  # connections muted by a throttle, counted by each sweep
        self.metrics.muted.set_function(lambda: self.muted)
        self.metrics.unfronted.set_function(
            lambda: 0 if self.nodes is None else self.nodes.unfronted)
        self._events_waiting = asyncio.Event()
        self.drops = Drops()
        self.usage = UsageRecorder(config.aggregate, config.max_pending,
                                   on_first=self._events_waiting.set, gateway=config.gateway_id,
                                   span_ms=config.flush_ms, drops=self.drops)
        self._own_directives = directives is None
        #: what every decision consults (`directives` is replaced once the subscriber started)
        self.quotas = QuotaSources(directives, self.local)  # type: ignore[arg-type]
        self.connection_quota = ConnectionQuota(self.quotas, self.usage)
        self.request_quota = RequestQuota(self.quotas)
        self.mutation_quota = MutationQuota(self.quotas, self.usage)
        self.nodes: NodeMap | None = None  # set by start()
        self.metadata_version = 4
        self.bootstrap_node: int | None = None  # until known, bootstrap connections wait to be placed
        self.sessions: set[Session] = set()
        self.counts = ConnectionCounts(config.limits)
        self.draining = False  # `drain`: no new connections, nothing more read
        #: closed while draining, their client sockets open until the client closes its side
        self._lingering: set[Session] = set()
        self._drain_progress = asyncio.Event()
        self._sweep_task: asyncio.Task[None] | None = None
        self._servers: dict[int | None, asyncio.base_events.Server] = {}
        self._binding: dict[int, asyncio.Future[None]] = {}
        self._acceptors: dict[int, Acceptor] = {}
        self._bootstrap_targets: list[Address] = list(config.upstream)
        self._producer: Any = None
        self._publisher: EventPublisher | None = None
        self._source = Source.gateway(config.gateway_id)
        self._publisher_loop: Supervised | None = None
        self._recorded = 0

    @property
    def directives(self) -> Any:
        """The directives in force (a `DirectiveSubscriber` once started)."""
        return self.quotas.directives

    @directives.setter
    def directives(self, directives: Any) -> None:
        self.quotas.directives = directives

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    # ------------------------------------------------------------------------- start / stop

    async def start(self) -> None:
        cfg = self.config
        info = await probe_cluster(cfg.upstream, cfg.upstream_tls, cfg.probe_timeout,
                                   cfg.upstream_sasl)
        self._learn_cluster(info)
        if self._own_directives:
            await self._start_directives()
        self.metrics.directives.set_function(lambda: len(self.directives))
        self.metrics.directives_ready.set_function(
            lambda: 1.0 if getattr(self.directives, "is_ready", True) else 0.0)
        if self.local is not None and cfg.allocations:  # the subscriber reads allocations too
            nodes = self.nodes
            assert nodes is not None
            live = (lambda: cfg.gateways) if cfg.gateway_id is not None else \
                (lambda: len(nodes.node_ids))
            self.local.obey(AllocatedLimits(self.directives.allocations,  # type: ignore[attr-defined]
                                            live))
        if self.local is not None and cfg.local is not None:
            await self._start_configs()
        await self._start_events()
        await self.serve(info)

    async def serve(self, info: ClusterInfo) -> None:
        """Listen on the bootstrap port and each broker's, for the cluster `info` describes
        (`start` does this after connecting to Kafka; tests call it alone)."""
        cfg = self.config
        if self.nodes is None:
            self._learn_cluster(info)
        self._sweep_task = asyncio.create_task(self._sweep_loop(), name="gateway-sweep")
        await self._listen(None, cfg.listen[1])
        assert self.nodes is not None
        for node_id in self.nodes.node_ids:
            await self._bind(node_id)
        logger.info("gateway listening on %s:%d for %s; brokers: %s", cfg.listen[0], cfg.listen[1],
                    ",".join(f"{h}:{p}" for h, p in cfg.upstream), self.describe_ports())

    def _learn_cluster(self, info: ClusterInfo) -> None:
        """The port rule, brokers and versions from the flags and the start-up probe (which
        names no brokers in front of a SASL listener: `learn` then fills in the rest)."""
        cfg = self.config
        self.metadata_version = min(info.versions.get(3, (0, 4))[1], 12)
        rule = PortRule(cfg.advertised_host,
                        cfg.node_port_base if cfg.node_port_base is not None else cfg.listen[1] + 1,
                        cfg.first_node_id, cfg.max_nodes)
        self.nodes = NodeMap(rule)
        self._bootstrap_targets = [info.answered_by] + [a for a in cfg.upstream if a != info.answered_by]
        self.bootstrap_node = cfg.bootstrap_node_id
        self.nodes.learn(info.nodes)
        self._name_bootstrap(info.nodes)

    def _name_bootstrap(self, nodes: list[Node]) -> None:
        """The broker bootstrap connections reach, from the first brokers learned: the one at
        the address they go to first, else the lowest id."""
        if self.bootstrap_node is not None or not nodes:
            return
        first = self._bootstrap_targets[0]
        named = [n.node_id for n in nodes if (n.host, n.port) == first]
        self.bootstrap_node = named[0] if named else min(n.node_id for n in nodes)
        logger.info("bootstrap connections reach broker %d", self.bootstrap_node)
        for session in list(self.sessions):
            if session.node_id == UNKNOWN_NODE:
                self.place(session, self.bootstrap_node)

    def place(self, session: Session, node_id: int) -> None:
        """A bootstrap connection accepted before its broker was known: from now on it is that
        broker's, and its connection is charged (and judged by the connection quotas) now."""
        session.node_id = node_id
        now = self.now_ms()
        _delay, close_ms, _local = self.connection_quota.first(node_id, now, self.listener,
                                                               session.ip)
        self.connection_quota.accepted(node_id, now, self.listener, session.ip)
        if close_ms > 0:  # as the acceptor: closed when the IP's throttle ends
            self.metrics.connection("closed")
            asyncio.get_running_loop().call_later(close_ms / 1000.0, session.close)

    @property
    def cluster_known(self) -> bool:
        """Whether the port rule and the bootstrap broker are known (else a client's first
        authenticated connection asks the cluster, `Session`)."""
        return (self.bootstrap_node is not None and self.nodes is not None
                and self.nodes.rule.first_node_id is not None)

    def describe_ports(self) -> str:
        assert self.nodes is not None
        if not self.nodes.node_ids:
            return "learned once a client has authenticated"
        parts = []
        for node_id in self.nodes.node_ids:
            client = self.nodes.client_address(node_id)
            parts.append(f"{node_id} at :{client[1]}" if client else f"{node_id} (no port)")
        return ", ".join(parts)

    async def _start_directives(self) -> None:
        from app.subscriber.consumer import DirectiveSubscriber, SubscriberError

        cfg = self.config
        sub = DirectiveSubscriber(cfg.kafka_bootstrap, None, topic=cfg.directives_topic,
                                  signing=cfg.signing, security=cfg.kafka_security,
                                  poll_timeout_ms=100, start_timeout=cfg.directives_timeout,
                                  consumer_options={"fetch_max_wait_ms": 50},
                                  supervision=self.reader_supervision("directives"))
        try:
            await sub.start()
        except SubscriberError as exc:
            raise GatewayError(f"{exc}: check KAFKA_BOOTSTRAP_SERVERS and that the control topic "
                               f"{cfg.directives_topic!r} exists") from None
        self.directives = sub
        try:
            await sub.wait_ready(timeout=cfg.directives_timeout)
        except TimeoutError:
            logger.warning("directives not rebuilt within %.0f s: serving with what was read so "
                           "far, the rest follows", cfg.directives_timeout)

    def reader_supervision(self, reader: str) -> Supervision:
        """A crashed directive or config reader (or the usage publisher) restarts with a
        backoff, counted in
        `quota_streams_gateway_reader_restarts_total{reader}`, and the gateway is not `healthy`
        meanwhile. Not an exit: the gateway would take its clients' connections down with it,
        while restarted it goes on enforcing the directives it holds (until their `until`) and
        its own quota managers; a reader that keeps crashing is in the metrics and the alerts."""
        counter = self.metrics.reader_restarts.labels(reader)
        return Supervision(on_crash=lambda _exc: counter.inc())

    def readiness(self) -> dict[str, bool]:
        """What `/ready` reports: `ready` while the gateway listens for clients (it does once the
        upstream answered the start-up probe), has read the control topic to its end and (for
        its own quota managers) the config topic, its readers and usage publisher run
        (`healthy`), and it is not draining. `all_brokers_fronted` is a warning beside it: a
        broker the gateway has no port for is left out of its answers (`nodes.NodeMap`)."""
        server = self._servers.get(None)
        state = {
            "listening": server is not None and server.is_serving(),
            "directives_ready": bool(getattr(self.directives, "is_ready", True)),
            "configs_ready": self.config.local is None or (
                self._follower is not None and self._follower.ready.is_set()),
            "readers_healthy": self.healthy,
            "draining": self.draining,
            # a warning, not a reason to take clients elsewhere: the other brokers are served
            "all_brokers_fronted": self.nodes is None or not self.nodes.unfronted,
        }
        state["ready"] = (state["listening"] and state["directives_ready"]
                          and state["configs_ready"] and state["readers_healthy"]
                          and not self.draining)
        return state

    @property
    def healthy(self) -> bool:
        """Its control-topic readers are running (for a readiness probe): False while one of
        them is crashed and waiting to restart."""
        readers = [self._follower]
        if self._own_directives:
            readers.append(self.directives)
        loops = [self._publisher_loop]
        return all(r.healthy for r in (*readers, *loops) if r is not None)

    def config_follower(self) -> ConfigFollower:
        """The local engine's follower of the config topic, as every worker has one; the
        records it refuses are counted in `quota_streams_gateway_configs_refused_total`."""
        from app.kafka.config_follower import ConfigFollower, refused_label

        assert self.local is not None
        refused = self.metrics.configs_refused
        return ConfigFollower(self.config.kafka_bootstrap, self.config.configs_topic,
                              self.local.engine.timeline,
                              on_bad=lambda reason, _value: refused.labels(
                                  refused_label(reason)).inc(),
                              signing=self.config.signing, security=self.config.kafka_security,
                              supervision=self.reader_supervision("configs"))

    async def _start_configs(self) -> None:
        """Follow the config topic into the local engine."""
        cfg = self.config
        follower = self.config_follower()
        try:  # bounded by its own requests' timeouts; once started, it follows for good
            await follower.start()
        except Exception as exc:
            await follower.stop()
            raise GatewayError(f"cannot follow the config topic {cfg.configs_topic!r} at "
                               f"{cfg.kafka_bootstrap} ({reason(exc)}): check "
                               "KAFKA_BOOTSTRAP_SERVERS and that the topic exists") from None
        self._follower = follower
        try:
            async with asyncio.timeout(cfg.directives_timeout):
                await follower.ready.wait()
        except TimeoutError:
            logger.warning("quota configs not all read within %.0f s: local quotas start with "
                           "what was read so far, the rest follows", cfg.directives_timeout)

    async def _start_events(self) -> None:
        from aiokafka import AIOKafkaProducer

        cfg = self.config
        producer = AIOKafkaProducer(bootstrap_servers=cfg.kafka_bootstrap, acks="all",
                                    linger_ms=cfg.flush_ms, request_timeout_ms=15_000,
                                    **cfg.kafka_security.aiokafka())
        try:
            async with asyncio.timeout(cfg.probe_timeout):
                await producer.start()
        except BaseException as exc:
            await producer.stop()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise GatewayError(f"cannot reach Kafka at {cfg.kafka_bootstrap} for the usage events "
                               f"({type(exc).__name__}); check KAFKA_BOOTSTRAP_SERVERS") from None
        self._producer = producer
        self._publisher = EventPublisher(producer, cfg.topics, RecordEncoder(
            cfg.columnar_events, cfg.max_record_bytes, self.drops))
        self._publisher_loop = Supervised("usage publisher", self._publish_loop,
                                          self.reader_supervision("usage"))
        self._publisher_loop.start()

    def drain(self) -> None:
        """Stop without losing an answer owed: accept no new connection and handle no new
        request; every connection closes once the answers it is owed (requests at the broker,
        or held by the gateway) are written (`drained` waits for that). Readiness is off from
        now on."""
        self.draining = True
        for server in self._servers.values():
            server.close()
        for session in list(self.sessions):
            session.drain()
        logger.info("draining: %d connections with requests in flight", len(self.sessions))

    async def drained(self, timeout: float) -> None:
        """Until every connection closed after `drain` and each client closed its side (so its
        last answers were delivered); at most `timeout` seconds, then what is left is closed at
        once. `stop` comes after (it publishes the last usage events)."""
        try:
            async with asyncio.timeout(timeout):
                while self.sessions or self._lingering:
                    self._drain_progress.clear()
                    await self._drain_progress.wait()
        except TimeoutError:
            logger.warning("drained for %.1f s: closing %d connections with requests still in "
                           "flight, %d whose clients did not close", timeout,
                           len(self.sessions), len(self._lingering))
        for session in list(self.sessions):
            session.close()
        for session in list(self._lingering):
            session.abort()
        self._lingering.clear()

    def lingering(self, session: Session) -> None:
        """`session` closed while draining: its client socket stays open until the client
        closes its side (`client_closed`)."""
        self._lingering.add(session)

    def client_closed(self, session: Session) -> None:
        """`session`'s client socket is closed."""
        if session in self._lingering:
            self._lingering.discard(session)
            self._drain_progress.set()

    async def stop(self) -> None:
        for server in self._servers.values():
            server.close()
        if self._sweep_task is not None:
            self._sweep_task.cancel()
        for session in list(self.sessions):
            session.close()
        if self._publisher_loop is not None:
            await self._publisher_loop.stop()
            await self._publish()  # what was recorded last still goes out
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
        if self._own_directives and self.directives is not None:
            await self.directives.stop()
        if self._follower is not None:
            await self._follower.stop()

    # ------------------------------------------------------------------------- listeners

    async def _listen(self, node_id: int | None, port: int) -> None:
        cfg = self.config
        server = await asyncio.get_running_loop().create_server(
            lambda: self._session(node_id).client_protocol(), cfg.listen[0], port,
            ssl=cfg.client_tls, reuse_address=True)
        self._servers[node_id] = server

    def listening_port(self, node_id: int | None = None) -> int:
        """The port the gateway listens on for broker `node_id` (None: the bootstrap port)."""
        return int(self._servers[node_id].sockets[0].getsockname()[1])

    def _session(self, node_id: int | None) -> Session:
        if node_id is None:
            bootstrap = UNKNOWN_NODE if self.bootstrap_node is None else self.bootstrap_node
            return Session(self, bootstrap, bootstrap=True)
        return Session(self, node_id)

    async def _bind(self, node_id: int) -> None:
        assert self.nodes is not None
        port = self.nodes.rule.port(node_id)
        if port is None or node_id in self._servers or self.draining:
            return
        try:
            await self._listen(node_id, port)
        except OSError as exc:
            logger.error("cannot listen for broker %d on port %d: %s", node_id, port, exc)

    def client_address(self, node_id: int) -> tuple[str, int] | None:
        """Where clients reach broker `node_id` through this gateway (None: not through it)."""
        return None if self.nodes is None else self.nodes.client_address(node_id)

    def learn(self, nodes: list[Node]) -> asyncio.Future[None] | None:
        """Brokers a response named: a future to wait on when some need a port first."""
        assert self.nodes is not None
        self.nodes.learn(nodes)
        self._name_bootstrap(nodes)
        missing = [n.node_id for n in nodes if n.node_id not in self._servers
                   and self.nodes.rule.port(n.node_id) is not None]
        if not missing:
            return None
        for node_id in missing:
            if node_id not in self._binding:
                self._binding[node_id] = asyncio.ensure_future(self._bind(node_id))
        return asyncio.ensure_future(self._bound([self._binding[n] for n in missing]))

    @staticmethod
    async def _bound(binding: list[asyncio.Future[None]]) -> None:
        await asyncio.gather(*binding, return_exceptions=True)  # a port that fails is logged

    # ------------------------------------------------------------------------- connections

    def opened(self, session: Session) -> bool:
        """A new client connection, within `--max-connections` (else closed: False). Its client's
        address may not be known yet (`config.proxy_protocol`): `admit` it once it is."""
        refused = self.counts.open()
        if refused is not None:
            self.metrics.connection(refused)
            session.close()
            return False
        self.sessions.add(session)
        self.metrics.open.set(len(self.sessions))
        return True

    def admit(self, session: Session) -> None:
        """An open connection whose client's address is known: within `--max-connections-per-ip`,
        to its port's acceptor; else closed."""
        refused = self.counts.place(session.ip)
        if refused is not None:
            self.metrics.connection(refused)
            session.close()
            return
        session.placed = True
        if session.node_id == UNKNOWN_NODE:  # no broker to decide for yet: charged when placed
            self.metrics.connection("accepted")
            session.admitted()
            return
        acceptor = self._acceptors.get(session.node_id)
        if acceptor is None:
            acceptor = self._acceptors[session.node_id] = Acceptor(self, session.node_id)
        acceptor.arrive(session)

    def forget(self, session: Session) -> None:
        if session in self.sessions:
            self.sessions.discard(session)
            self.counts.release(session.ip if session.placed else None)
            self.metrics.open.set(len(self.sessions))
            if self.draining:
                self._drain_progress.set()

    def connect(self, session: Session) -> None:
        session.connecting = asyncio.ensure_future(self._connect(session))

    async def _connect(self, session: Session) -> None:
        """The client's own connection to its broker (cancelled if the client leaves first)."""
        assert self.nodes is not None
        targets = self._bootstrap_targets if session.bootstrap else []
        address = self.nodes.upstream(session.node_id)
        if not session.bootstrap and address is not None:
            targets = [address]
        loop = asyncio.get_running_loop()
        for host, port in targets:
            try:
                async with asyncio.timeout(self.config.connect_timeout):
                    await loop.create_connection(session.broker_protocol, host, port,
                                                 ssl=self.config.upstream_tls)
            except (OSError, TimeoutError) as exc:
                self.metrics.upstream_errors.inc()
                logger.warning("cannot connect to broker %d at %s:%d: %s", session.node_id, host,
                               port, reason(exc))
                continue
            session.connecting = None
            if not session.closed:
                session.connected()
            return
        session.connecting = None
        session.close()

    # ------------------------------------------------------------------------- sweep

    async def _sweep_loop(self) -> None:
        interval = self.limits.sweep_interval()
        while True:
            await asyncio.sleep(interval)
            self.sweep(self.clock())

    def sweep(self, now: float) -> None:
        """Close the connections idle for longer than the idle timeout and those whose broker
        left a request unanswered for longer than the request timeout (`now`: `clock`); count
        the bytes held and the connections muted for the gauges."""
        idle = self.limits.idle_timeout_ms / 1000.0
        timeout = self.limits.request_timeout_ms / 1000.0
        for session in list(self.sessions):
            why = session.expired(now, idle, timeout)
            if why is not None:
                session.close(why)
        self.buffered = sum(s.buffered for s in self.sessions)
        self.muted = sum(1 for s in self.sessions if s.muted)

    # ------------------------------------------------------------------------- usage events

    async def _publish_loop(self) -> None:
        """Every `flush_ms` while there are events; asleep while the gateway is idle."""
        interval = self.config.flush_ms / 1000.0
        while True:
            await self._events_waiting.wait()
            await asyncio.sleep(interval)
            self._events_waiting.clear()
            await self._publish()

    async def _publish(self) -> None:
        """One flush: every span recorded since the last, one record per event kind each
        (split only by the record size bound), keyed by this gateway; then the drops counted."""
        usage = self.usage
        self.metrics.events.inc(usage.recorded - self._recorded)
        self._recorded = usage.recorded
        spans = usage.flush()
        if spans and self._publisher is not None:
            self.metrics.records.inc(await self._publisher.send(self._source, spans))
        dropped, failed = self.drops.take()
        for why, events in dropped.items():
            if events:
                self.metrics.events_dropped.labels(why).inc(events)
        self.metrics.send_errors.inc(failed)


__all__ = ["UNKNOWN_NODE", "Acceptor", "ClusterInfo", "Gateway", "GatewayConfig", "GatewayError",
           "probe_cluster"]
