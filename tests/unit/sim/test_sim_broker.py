"""A simulated broker obeys directives as the contract says, and emits valid contract batches."""

from __future__ import annotations

from typing import Any

import orjson

from app.engine.configs import QuotaConfigs, parse_config_record
from app.engine.events import BadEvent, ConnectionEvent, MutationEvent, RequestEvent, parse_record
from app.sim.broker import CONNECTION, REQUEST, SimBroker
from app.sim.meter import Meter
from app.sim.scenario import Listener
from app.subscriber.active_set import ActiveSet
from app.usage.records import RecordEncoder

T0 = 1_763_800_000_000


def directive(quota: str, action: str, entity: dict[str, Any], ts: int, until: int,
              scope: str = "cluster", broker: int | None = None) -> dict[str, Any]:
    return {"v": 1, "ts": ts, "scope": scope, "broker": broker, "entity": entity, "quota": quota,
            "action": action, "throttle_time_ms": until - ts, "until": until, "observed": 2.0,
            "limit": 1.0, "window_ms": 10000, "config_level": None}


class Harness:
    def __init__(self, listeners: tuple[Listener, ...] = (Listener("PLAINTEXT"),),
                 quotas: list[dict[str, Any]] | None = None, aggregate: bool = True) -> None:
        self.active = ActiveSet(1)
        configs = QuotaConfigs()
        for q in quotas or []:
            configs.apply(parse_config_record({"type": "quota_config", "v": 1, "ts": 0, **q}))
        self.meter = Meter(configs, T0)
        self.wakeups: list[tuple[float, Any]] = []
        # a flush interval longer than any test: each test's events are one flush
        self.broker = SimBroker(1, listeners, self.active, self.meter,
                                lambda t, actor: self.wakeups.append((t, actor)), aggregate,
                                flush_ms=60_000)

    def wake(self) -> None:
        """Run the scheduled acceptor wake-ups in time order (what the World would do)."""
        while self.wakeups:
            self.wakeups.sort(key=lambda w: w[0])
            t, actor = self.wakeups.pop(0)
            nxt = actor.act(t)
            if nxt is not None:
                self.wakeups.append((nxt, actor))

    def events(self) -> list[tuple[str, Any]]:
        """(kind, event) of every event flushed, read back from the JSON records sent."""
        out = []
        for record in RecordEncoder().records(self.broker.flush()):
            for item in parse_record(orjson.loads(record.value)):
                assert not isinstance(item, BadEvent), item.reason
                out.append((record.kind, item))
        return out


def test_throttled_produce_responds_then_mutes_until_the_directive_ends() -> None:
    h = Harness()
    conn = h.broker.open(T0, "alice", "app", "10.0.0.1", "PLAINTEXT")
    assert h.broker.request(conn, T0 + 10, "Produce", 1000, 0.5, 0.1) == (0, 1000)
    assert conn.muted_until == 0
    h.active.apply(directive("producer_byte_rate", "throttle", {"user": "alice", "client_id": ""},
                             T0, T0 + 2000))
    throttle, delivered = h.broker.request(conn, T0 + 500, "Produce", 1000, 0.5, 0.1)
    # KIP-219: the response goes out at once carrying the throttle, the bytes are recorded,
    # and the channel stays muted until the throttle ends
    assert (throttle, delivered) == (1500, 1000)
    assert conn.muted_until == T0 + 2000
    row = h.meter.rows[("producer_byte_rate", "user=alice client_id=app")]
    assert sum(row.amounts.values()) == 2000
    assert row.outcomes[(0, "throttled")] == 1


def test_fetch_throttle_sends_an_empty_response_and_only_fetch_quotas_apply() -> None:
    h = Harness()
    conn = h.broker.open(T0, "carol", "etl", "10.0.0.3", "PLAINTEXT")
    h.active.apply(directive("producer_byte_rate", "throttle", {"user": "carol", "client_id": ""},
                             T0, T0 + 2000))
    assert h.broker.request(conn, T0 + 1, "Fetch", 5000, 0.5, 0.0) == (0, 5000)
    h.active.apply(directive("consumer_byte_rate", "throttle", {"user": "carol", "client_id": ""},
                             T0, T0 + 1000))
    assert h.broker.request(conn, T0 + 100, "Fetch", 5000, 0.5, 0.0) == (900, 0)
    fetches = [e for _, e in h.events() if isinstance(e, RequestEvent)]
    assert [(e.api, e.bytes, e.count) for e in fetches] == [("Fetch", 5000, 2)]


def test_strict_mutation_is_rejected_and_legacy_is_throttled() -> None:
    h = Harness()
    conn = h.broker.open(T0, "ops", "tf", "10.0.0.9", "PLAINTEXT")
    h.active.apply(directive("controller_mutation_rate", "reject",
                             {"user": "ops", "client_id": "tf"}, T0, T0 + 3000))
    assert h.broker.mutate(conn, T0 + 1000, "CreateTopics", 7, 10, 1) == (True, 2000)
    assert conn.muted_until == T0 + 3000
    assert h.broker.mutate(conn, T0 + 1000, "CreateTopics", 5, 10, 2) == (False, 2000)
    mutations = [e for _, e in h.events() if isinstance(e, MutationEvent)]
    assert [(e.api_version, e.partitions, e.strict) for e in mutations] == [(5, 10, False)] * 2
    assert h.broker.mutate(conn, T0 + 3000, "CreateTopics", 7, 10, 1) == (False, 0)  # expired


def test_ip_under_close_directive_has_new_connections_closed() -> None:
    h = Harness(quotas=[{"entity": {"ip": "203.0.113.9"}, "quotas": {"connection_creation_rate": 5}}])
    outcomes: list[str] = []
    h.active.apply(directive("connection_creation_rate", "close_connection",
                             {"ip": "203.0.113.9"}, T0, T0 + 1000))
    h.broker.connect(T0 + 10, "203.0.113.9", "PLAINTEXT", lambda o, t: outcomes.append(o))
    h.broker.connect(T0 + 20, "10.0.0.1", "PLAINTEXT", lambda o, t: outcomes.append(o))
    h.broker.connect(T0 + 1000, "203.0.113.9", "PLAINTEXT", lambda o, t: outcomes.append(o))
    assert outcomes == ["closed", "accepted", "accepted"]
    accepted = [e for _, e in h.events() if isinstance(e, ConnectionEvent)]
    assert [e.ip for e in accepted] == ["10.0.0.1", "203.0.113.9"]  # closed ones are no events
    row = h.meter.rows[("connection_creation_rate", "ip=203.0.113.9")]
    assert sum(row.amounts.values()) == 1 and row.outcomes[(0, "closed")] == 1


def test_listener_delay_holds_the_acceptor_and_queues_later_connections() -> None:
    listeners = (Listener("PLAINTEXT"), Listener("EXTERNAL"), Listener("REPLICATION", True))
    h = Harness(listeners)
    times: list[tuple[str, float]] = []
    h.active.apply(directive("max_connection_creation_rate", "delay_connection",
                             {"broker": 1, "listener": "EXTERNAL"}, T0, T0 + 300, "broker", 1))
    for i, listener in enumerate(["EXTERNAL", "EXTERNAL", "PLAINTEXT"]):
        h.broker.connect(T0 + i, f"10.0.0.{i}", listener, lambda o, t: times.append((o, t)))
    assert times == [("accepted", T0 + 2)]  # the other listener's acceptor is not held
    h.wake()
    assert times[1:] == [("delayed", T0 + 300), ("accepted", T0 + 300)]
    events = [e for _, e in h.events() if isinstance(e, ConnectionEvent)]
    assert [(e.listener, e.ts) for e in events] == [
        ("PLAINTEXT", T0 + 2), ("EXTERNAL", T0 + 300), ("EXTERNAL", T0 + 300)]


def test_inter_broker_listener_ignores_the_broker_wide_delay() -> None:
    listeners = (Listener("PLAINTEXT"), Listener("REPLICATION", True))
    h = Harness(listeners)
    h.active.apply(directive("max_connection_creation_rate", "delay_connection",
                             {"broker": "<default>"}, T0, T0 + 500, "broker", 1))
    seen: list[str] = []
    h.broker.connect(T0, "10.9.9.9", "REPLICATION", lambda o, t: seen.append(o))
    h.broker.connect(T0, "10.0.0.1", "PLAINTEXT", lambda o, t: seen.append(o))
    assert seen == ["accepted"]
    h.wake()
    assert seen == ["accepted", "delayed"]
    (event,) = [e for _, e in h.events() if isinstance(e, ConnectionEvent) and e.inter_broker]
    assert event.ip == "10.9.9.9"


def test_one_record_per_event_kind_per_flush_with_aggregated_requests() -> None:
    h = Harness()
    a = h.broker.open(T0, "alice", "app", "10.0.0.1", "PLAINTEXT")
    b = h.broker.open(T0, "bob", "app", "10.0.0.2", "PLAINTEXT")
    for i in range(3):
        h.broker.request(a, T0 + 10 * i, "Produce", 100, 1.0, 0.5)
    h.broker.request(b, T0 + 5, "Produce", 7, 0.25, 0.0)
    records = RecordEncoder().records(h.broker.flush())
    assert [r.kind for r in records] == [REQUEST, CONNECTION]  # every principal in one record
    events = orjson.loads(records[0].value)["events"]
    assert {e["user"] for e in events} == {"alice", "bob"}
    (alice,) = [e for e in events if e["user"] == "alice"]
    assert (alice["ts"], alice["broker"], alice["count"], alice["bytes"], alice["thread_time_ms"],
            alice["network_time_ms"]) == (T0 + 20, 1, 3, 300, 3.0, 1.5)
    assert h.broker.flush() == []  # nothing twice


def test_without_aggregation_every_request_is_an_event() -> None:
    h = Harness(aggregate=False)
    conn = h.broker.open(T0, "alice", "app", "10.0.0.1", "PLAINTEXT")
    for i in range(3):
        h.broker.request(conn, T0 + i, "Produce", 100, 1.0, 0.0)
    requests = [e for kind, e in h.events() if kind == REQUEST]
    assert [(e.ts, e.count) for e in requests] == [(T0, 1), (T0 + 1, 1), (T0 + 2, 1)]
