"""Kafka as the ground truth: the same requests to a real broker with quotas set and, as contract
events, through `replay`; Kafka's answers and the engine's decisions must agree.

For each quota type a scripted sequence of raw requests (`raw_kafka`) goes to the session's
broker, each on a connection of its own (a throttled connection is muted by the broker; a new
one is not, and the quota is the client id's, so the sequence keeps its schedule). Each
request's `throttle_time_ms`, per-topic error codes, or for connections whether the broker
served or closed it, are recorded with the times the request left and its answer arrived. The
same sequence becomes contract events (bytes as the broker counts them, `ts` the middle of that
interval) and goes through `app.intake.replay.replay`. Run with `-s` to see the per-request table.

Tolerances, and why (each row prints its own):
- The broker reads its clock somewhere between a request leaving and its answer arriving, so
  an event's time is uncertain by half that interval, `u` (+1 ms for the two integer clocks).
  Before any sample expires (the sequences last < 3 s, samples expire after 11 s) a byte-rate
  throttle is `bytes/limit - windowSize` and `windowSize` depends only on this request's time
  and the first one's (the oldest sample's start), so the throttle is uncertain by
  `u_this + u_first` + 1 ms (Math.round). The token bucket's balance is linear in time the
  same way. A CreateTopics round trip is long (the controller charges the quota when it reads
  the request, then commits the topics before answering), so its middle is later than the
  charge by tens of ms; and the response carries the last rejection's throttle minus the time
  since (KIP-599): up to the request's own round trip less than the engine's.
- `windowSize` drops by one window (1000 ms) each time the elapsed time crosses a whole
  window, so a request within its uncertainty of such a crossing may differ by exactly 1000 ms
  (flagged `boundary`); the schedules keep requests away from crossings.
- A throttled connection is closed by the acceptor's loop, which polls every 500 ms: the close
  comes between the throttle and 500 ms (plus the uncertainty) after it.
- Request time (`request_percentage`) is measured inside the broker and cannot be reproduced;
  what is compared is where it does not matter: with a bound of 0.0001 % any request above
  11 µs of thread time is over the bound by more than the one-window cap, on both sides.
- Which requests are throttled or rejected, and which topics get THROTTLING_QUOTA_EXCEEDED,
  must be identical.
"""

from __future__ import annotations

import math
import selectors
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from kio.schema.errors import ErrorCode

from app.devstack.kafka import KafkaCluster
from app.engine.engine import EngineSettings
from app.gateway import apis
from app.intake.replay import replay
from tests.integration import raw_kafka as raw

pytestmark = pytest.mark.integration

W = 1000  # quota.window.size.seconds of the session cluster (Kafka's default), in ms
ACCEPTOR_POLL_MS = 500  # Acceptor.acceptNewConnections: nioSelector.select(500)
#: the acceptor takes a connection after the kernel completed the handshake the client saw
ACCEPT_LAG_MS = 10
USER = "ANONYMOUS"  # the principal of the PLAINTEXT listener
LISTENER = "PLAINTEXT"
CLIENT_IP = "127.0.0.1"
#: connections of the connection-rate case come from this loopback address, so its per-IP
#: quota touches no other client of the session cluster
SOURCE_IP = "127.0.0.2"


@dataclass
class Observed:
    """One request (or connection) as the broker answered it, with its contract events."""

    label: str
    sent_ms: float
    received_ms: float
    throttle_ms: int
    #: topics the broker refused with THROTTLING_QUOTA_EXCEEDED (mutations)
    rejected: tuple[str, ...] = ()
    #: connections: the broker closed it instead of serving it
    closed: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)
    extra_ms: float = 0.0  # tolerance beyond the timing uncertainty (see the module doc)
    topics: tuple[str, ...] = ()  # mutations: the topics asked for, in request order

    @property
    def ts(self) -> int:
        return round((self.sent_ms + self.received_ms) / 2)

    @property
    def uncertainty(self) -> int:
        return math.ceil((self.received_ms - self.sent_ms) / 2) + 1


@dataclass
class Row:
    """One line of the comparison."""

    case: str
    label: str
    offset_ms: int
    kafka_ms: int
    engine_ms: int
    kafka_what: str
    engine_what: str
    tolerance: tuple[int, int]  # engine - low <= kafka <= engine + high
    note: str = ""

    @property
    def agrees(self) -> bool:
        if self.kafka_what != self.engine_what:
            # one side just over the bound, the other just under: within the timing tolerance
            at_bound = "ok" in (self.kafka_what, self.engine_what) and \
                max(self.kafka_ms, self.engine_ms) <= self.tolerance[0]
            if not at_bound:
                return False
        low, high = self.tolerance
        diff = self.kafka_ms - self.engine_ms
        if -low <= diff <= high:
            return True
        return self.note == "boundary" and -low <= abs(diff) - W <= high


# -- the broker side ---------------------------------------------------------------------------

class Pacer:
    """Starts each request at its planned offset from the first: the schedule is the input of
    the comparison (where requests fall in the windows), not a wait for anything."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def remaining(self, offset_ms: int) -> float:
        """Seconds until the request planned at `offset_ms`."""
        return self.start + offset_ms / 1000 - time.monotonic()

    def at(self, offset_ms: int) -> None:
        delay = self.remaining(offset_ms)
        if delay > 0:
            time.sleep(delay)


def request_event(client_id: str, api: str, ts: int, nbytes: int = 0,
                  thread_ms: float = 0.0) -> dict[str, Any]:
    return {"type": "request", "v": 1, "ts": ts, "broker": 1, "listener": LISTENER,
            "user": USER, "client_id": client_id, "ip": CLIENT_IP, "api": api,
            "bytes": nbytes, "thread_time_ms": thread_ms}


def one_request(address: str, api_key: int, version: int, body: Any,
                client_id: str) -> raw.Exchange:
    with raw.RawConnection(address) as conn:
        return conn.exchange(api_key, version, body, client_id)


def produce_case(address: str, client_id: str, topic: str, schedule: list[int],
                 value_bytes: int) -> list[Observed]:
    """producer_byte_rate: Kafka records `request.sizeInBytes` (header and body) and keeps it
    recorded when it throttles."""
    records = raw.record_batch(value_bytes)
    out = []
    pacer = Pacer()
    for i, offset in enumerate(schedule):
        pacer.at(offset)
        ex = one_request(address, apis.PRODUCE, 9, raw.produce_v9(topic, records), client_id)
        errors = {p.error_code for t in ex.body.responses for p in t.partition_responses}
        assert errors == {ErrorCode.none}, errors
        seen = Observed(f"produce#{i + 1}", ex.sent_ms, ex.received_ms, ex.throttle_ms)
        seen.events.append(request_event(client_id, "Produce", seen.ts, ex.request_size))
        out.append(seen)
    return out


def fetch_case(address: str, client_id: str, topic: str, schedule: list[int],
               full_size: int) -> list[Observed]:
    """consumer_byte_rate: Kafka records the response size it computed before sending
    (`FetchResponse.sizeOf`: 4 + the body), and a throttled fetch gets an empty answer and its
    bytes taken back. The partition does not change, so every fetch would carry `full_size`."""
    out = []
    pacer = Pacer()
    for i, offset in enumerate(schedule):
        pacer.at(offset)
        ex = one_request(address, apis.FETCH, 12, raw.fetch_v12(topic), client_id)
        if ex.throttle_ms == 0:
            assert kafka_fetch_size(ex) == full_size, "the partition's answer changed"
        else:
            assert not ex.body.responses, "a throttled fetch is answered empty"
        seen = Observed(f"fetch#{i + 1}", ex.sent_ms, ex.received_ms, ex.throttle_ms)
        seen.events.append(request_event(client_id, "Fetch", seen.ts, full_size))
        out.append(seen)
    return out


def kafka_fetch_size(ex: raw.Exchange) -> int:
    """The size Kafka's fetch quota records for an answer: 4 + its body (the header's tagged
    fields of a flexible version are not counted)."""
    return 4 + ex.response_size - ex.response_header_size


def request_case(address: str, client_id: str, topic: str) -> list[Observed]:
    """request_percentage: the broker's thread time is unknown here; the events carry the round
    trip (an upper bound, as the gateway's). Metadata and a Produce, each over the bound."""
    out = []
    for i in range(3):
        ex = one_request(address, apis.METADATA, 12, raw.metadata_v12(), client_id)
        seen = Observed(f"metadata#{i + 1}", ex.sent_ms, ex.received_ms, ex.throttle_ms)
        seen.events.append(request_event(client_id, "Metadata", seen.ts,
                                         thread_ms=round(ex.rtt_ms, 3)))
        out.append(seen)
    ex = one_request(address, apis.PRODUCE, 9, raw.produce_v9(topic, raw.record_batch(100)),
                     client_id)
    seen = Observed("produce", ex.sent_ms, ex.received_ms, ex.throttle_ms)
    seen.events.append(request_event(client_id, "Produce", seen.ts, ex.request_size,
                                     thread_ms=round(ex.rtt_ms, 3)))
    out.append(seen)
    return out


def mutation_case(address: str, client_id: str, prefix: str,
                  plan: list[tuple[int, int, list[int]]]) -> list[Observed]:
    """controller_mutation_rate: (offset, CreateTopics version, partitions per topic) per
    request; v6+ is strict (a topic is refused while the bucket is in debt), v5 permissive."""
    out = []
    pacer = Pacer()
    n = 0
    for i, (offset, version, sizes) in enumerate(plan):
        topics = []
        for size in sizes:
            n += 1
            topics.append((f"{prefix}-{n}", size))
        pacer.at(offset)
        ex = one_request(address, apis.CREATE_TOPICS, version,
                         raw.create_topics(version, topics), client_id)
        codes = {t.name: t.error_code for t in ex.body.topics}
        others = {c for c in codes.values()
                  if c not in (ErrorCode.none, ErrorCode.throttling_quota_exceeded)}
        assert not others, codes
        rejected = tuple(name for name, c in codes.items()
                         if c == ErrorCode.throttling_quota_exceeded)
        seen = Observed(f"create_topics v{version} #{i + 1}", ex.sent_ms, ex.received_ms,
                        ex.throttle_ms, rejected=rejected, extra_ms=ex.rtt_ms,
                        topics=tuple(name for name, _ in topics))
        seen.events.append({"type": "batch", "v": 1, "events": [
            {"type": "mutation", "v": 1, "ts": seen.ts, "broker": 1, "user": USER,
             "client_id": client_id, "api": "CreateTopics", "api_version": version,
             "partitions": size, "validate_only": False} for _, size in topics]})
        out.append(seen)
    return out


def connection_case(address: str, schedule: list[int]) -> list[Observed]:
    """connection_creation_rate of SOURCE_IP: each connection sends ApiVersions; a served one
    is answered, an IP-throttled one is never read and closed after the throttle. The close
    time less the connect time is what the broker's throttle is compared with."""
    host, port = address.rsplit(":", 1)
    selector = selectors.DefaultSelector()
    pending: dict[socket.socket, Observed] = {}
    out: list[Observed] = []
    pacer = Pacer()
    try:
        for i, offset in enumerate(schedule):
            while (delay := pacer.remaining(offset)) > 0:  # closes are timed meanwhile
                _settle(selector, pending, delay)
            start = raw.now_ms()
            sock = socket.create_connection((host, int(port)), timeout=5,
                                            source_address=(SOURCE_IP, 0))
            connected = raw.now_ms()
            sock.sendall(raw.api_versions())
            sock.setblocking(False)
            seen = Observed(f"connection#{i + 1}", start, connected, 0, extra_ms=ACCEPT_LAG_MS)
            seen.events.append({"type": "connection", "v": 1, "ts": seen.ts, "broker": 1,
                                "listener": LISTENER, "ip": SOURCE_IP})
            out.append(seen)
            pending[sock] = seen
            selector.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + 3
        while pending and time.monotonic() < deadline:
            _settle(selector, pending, deadline - time.monotonic())
        assert not pending, "connections neither served nor closed within 3 s"
    finally:
        for key in list(selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        selector.close()
    return out


def _settle(selector: selectors.BaseSelector, pending: dict[socket.socket, Observed],
            timeout: float) -> None:
    """Record what happened to the connections that became readable: answered or closed."""
    for key, _ in selector.select(timeout):
        sock: socket.socket = key.fileobj  # type: ignore[assignment]
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            data = b""  # the broker closed it with our request unread
        seen = pending.pop(sock)
        if not data:
            seen.closed = True
            seen.throttle_ms = round(raw.now_ms() - seen.received_ms)
        selector.unregister(sock)
        sock.close()


# -- the engine side ---------------------------------------------------------------------------

def engine_answers(configs: list[dict[str, Any]], seen: list[Observed]) -> list[dict[str, Any]]:
    """Each observation's replay output, its configs in force from before the first event."""
    t0 = min(s.ts for s in seen) - 1000
    lines = [orjson.dumps({"type": "quota_config", "v": 1, "ts": t0, **c}) for c in configs]
    lines += [orjson.dumps(s.events[0]) for s in seen]
    results = list(replay(lines, EngineSettings()))
    return [r.output for r in results[len(configs):]]


def compare(case: str, seen: list[Observed], answers: list[dict[str, Any]],
            windowed: bool = True) -> list[Row]:
    """Rows of one case; `windowed`: a sampled rate (its window size jumps at whole windows),
    not the token bucket."""
    first = seen[0]
    rows = []
    for s, answer in zip(seen, answers):
        u = s.uncertainty + first.uncertainty + 1 + math.ceil(s.extra_ms)
        engine_ms = answer["throttle_time_ms"]
        offset = s.ts - first.ts
        near = offset + u >= W and min(offset % W, W - offset % W) <= u
        note = "boundary" if windowed and near else ""
        if "events" in answer:  # a mutation request: one decision per topic
            refused = [s.topics[i] for i, e in enumerate(answer["events"])
                       if any(d["action"] == "reject" for d in e["decisions"])]
            rows.append(Row(case, s.label, offset, s.throttle_ms, engine_ms,
                            _refusals(s.rejected), _refusals(tuple(refused)), (u, u), note))
        elif s.events[0]["type"] == "connection":
            closes = any(d["action"] == "close_connection" for d in answer["decisions"])
            rows.append(Row(case, s.label, offset, s.throttle_ms if s.closed else 0,
                            engine_ms if closes else 0, "closed" if s.closed else "served",
                            "closed" if closes else "served",
                            (u, u + ACCEPTOR_POLL_MS) if s.closed else (0, 0), note))
        else:
            rows.append(Row(case, s.label, offset, s.throttle_ms, engine_ms,
                            "throttled" if s.throttle_ms > 0 else "ok",
                            "throttled" if engine_ms > 0 else "ok", (u, u), note))
    return rows


def _refusals(topics: tuple[str, ...]) -> str:
    """Which topics of a request were refused, by their number in the case."""
    return "refused " + ",".join(t.rsplit("-", 1)[1] for t in topics) if topics else "admitted"


def table(rows: list[Row]) -> str:
    head = (f"{'case':<24} {'request':<22} {'at ms':>6} {'kafka ms':>9} {'engine ms':>9} "
            f"{'kafka':<14} {'engine':<14} {'tolerance':>11}  ok")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.case:<24} {r.label:<22} {r.offset_ms:>6} {r.kafka_ms:>9} "
                     f"{r.engine_ms:>9} {r.kafka_what:<14} {r.engine_what:<14} "
                     f"{f'-{r.tolerance[0]}/+{r.tolerance[1]}':>11}  "
                     f"{'yes' if r.agrees else 'NO'} {r.note}")
    return "\n".join(lines)


# -- the test ----------------------------------------------------------------------------------

@pytest.fixture
def quotas(kafka_cluster: KafkaCluster) -> Iterator[tuple[str, dict[str, dict[str, Any]]]]:
    """Unique client ids with one quota each, set on the broker through AlterClientQuotas and
    removed afterwards, so other tests on the session cluster are unaffected."""
    address = kafka_cluster.nodes[0].address("PLAINTEXT")
    uid = uuid.uuid4().hex[:8]
    entities: dict[str, dict[str, Any]] = {
        "producer_byte_rate": {"entity": {"client_id": f"gt-produce-{uid}"},
                               "quotas": {"producer_byte_rate": 10_000}},
        "consumer_byte_rate": {"entity": {"client_id": f"gt-fetch-{uid}"},
                               "quotas": {"consumer_byte_rate": 10_000}},
        "request_percentage": {"entity": {"client_id": f"gt-request-{uid}"},
                               "quotas": {"request_percentage": 0.0001}},
        "controller_mutation_rate": {"entity": {"client_id": f"gt-mutation-{uid}"},
                                     "quotas": {"controller_mutation_rate": 2}},
        "connection_creation_rate": {"entity": {"ip": SOURCE_IP},
                                     "quotas": {"connection_creation_rate": 1}},
    }
    with raw.RawConnection(address) as admin:
        try:
            for item in entities.values():
                raw.alter_client_quotas(admin, item["entity"], item["quotas"])
            for item in entities.values():
                raw.await_client_quotas(admin, item["entity"], item["quotas"])
            yield uid, entities
        finally:
            for item in entities.values():
                gone = dict.fromkeys(item["quotas"])
                raw.alter_client_quotas(admin, item["entity"], gone)
                raw.await_client_quotas(admin, item["entity"], gone)


def prepare_topics(address: str, client_id: str, produce_topic: str, fetch_topic: str) -> int:
    """Create the two topics (as a client without quotas), put one batch in each and return the
    size Kafka's fetch quota counts for an answer holding the fetch topic's."""
    with raw.RawConnection(address) as conn:
        made = conn.exchange(apis.CREATE_TOPICS, 7, raw.create_topics(
            7, [(produce_topic, 1), (fetch_topic, 1)]), client_id).body
        assert {t.error_code for t in made.topics} == {ErrorCode.none}, made
        records = raw.record_batch(20_000)
        deadline = time.monotonic() + 15
        for topic in (produce_topic, fetch_topic):
            while True:  # until the new partition has its leader
                answer = conn.exchange(apis.PRODUCE, 9, raw.produce_v9(topic, records),
                                       client_id).body
                codes = {p.error_code for t in answer.responses for p in t.partition_responses}
                if codes == {ErrorCode.none}:
                    break
                assert time.monotonic() < deadline, f"producing to {topic}: {codes}"
                time.sleep(0.05)
        return kafka_fetch_size(conn.exchange(apis.FETCH, 12, raw.fetch_v12(fetch_topic),
                                              client_id))


def test_engine_decides_as_kafka(kafka_cluster: KafkaCluster,
                                 quotas: tuple[str, dict[str, dict[str, Any]]]) -> None:
    address = kafka_cluster.nodes[0].address("PLAINTEXT")
    uid, entities = quotas
    produce_topic, fetch_topic = f"gt-produce-{uid}", f"gt-fetch-{uid}"
    full_size = prepare_topics(address, f"gt-loader-{uid}", produce_topic, fetch_topic)

    def client(quota: str) -> str:
        return str(entities[quota]["entity"]["client_id"])

    def configs(quota: str) -> list[dict[str, Any]]:
        return [entities[quota]]

    # 10 connections a second fit a rate of 1/s over the first 10 s window; then each
    # connection is over it by less than a window (so the throttle is below the 1000 ms cap)
    conn_seen = connection_case(address, [20 * i for i in range(10)] + [300, 650, 1250, 1750])
    request_seen = request_case(address, client("request_percentage"), produce_topic)
    # 20 kB requests against 10 kB/s: throttled from the sixth, away from window crossings
    schedule = [0, 150, 300, 450, 600, 750, 1300, 1600, 2350]
    produce_seen = produce_case(address, client("producer_byte_rate"), produce_topic, schedule,
                                20_000)
    fetch_seen = fetch_case(address, client("consumer_byte_rate"), fetch_topic, schedule,
                            full_size)
    # rate 2/s, burst 22: 20 admitted; then 4 admitted into debt and 4 refused; a permissive
    # v5 goes into debt and is throttled; a strict one in debt refused
    mutation_seen = mutation_case(address, client("controller_mutation_rate"),
                                  f"gt-mutation-{uid}",
                                  [(0, 7, [10, 10]), (200, 7, [4, 4]), (1300, 5, [2]),
                                   (1500, 7, [1])])

    rows = (compare("connection_creation_rate", conn_seen,
                    engine_answers(configs("connection_creation_rate"), conn_seen))
            + compare("request_percentage", request_seen,
                      engine_answers(configs("request_percentage"), request_seen))
            + compare("producer_byte_rate", produce_seen,
                      engine_answers(configs("producer_byte_rate"), produce_seen))
            + compare("consumer_byte_rate", fetch_seen,
                      engine_answers(configs("consumer_byte_rate"), fetch_seen))
            + compare("controller_mutation_rate", mutation_seen,
                      engine_answers(configs("controller_mutation_rate"), mutation_seen),
                      windowed=False))
    print("\n" + table(rows))
    assert all(r.agrees for r in rows), "\n" + table([r for r in rows if not r.agrees])
    # the quotas were in force on the broker: every case has requests it held back
    for case in entities:
        assert any(r.kafka_what != "ok" and r.kafka_what not in ("served", "admitted")
                   for r in rows if r.case == case), f"the broker never enforced {case}"
