"""Simulated clients in a World driven by made-up times (no clock, no Kafka)."""

from __future__ import annotations

from typing import Any

from app.sim.scenario import parse_scenario
from app.sim.world import World
from app.subscriber.active_set import ActiveSet

T0 = 1_763_800_000_000
MiB = 1 << 20


def world(clients: list[dict[str, Any]], brokers: int = 3, **extra: Any) -> tuple[World, dict[int, ActiveSet]]:
    sc = parse_scenario({"brokers": brokers, "clients": clients, **extra})
    sets = {b: ActiveSet(b) for b in sc.brokers}
    return World(sc, sets, T0), sets


def throttle_alice(sets: dict[int, ActiveSet], start: int, end: int, quota: str = "producer_byte_rate") -> None:
    d = {"v": 1, "ts": start, "scope": "cluster", "broker": None,
         "entity": {"user": "alice", "client_id": ""}, "quota": quota, "action": "throttle",
         "throttle_time_ms": end - start, "until": end, "observed": 2.0, "limit": 1.0,
         "window_ms": 10000, "config_level": "/config/users/alice"}
    for s in sets.values():
        s.apply(d)


def produced_between(w: World, quota: str, entity: str, a: float, b: float) -> float:
    row = w.meter.rows[(quota, entity)]
    return sum(v for (bucket, _), v in row.amounts.items() if a <= bucket < b)


def test_well_behaved_producer_is_paced_and_spread_over_brokers() -> None:
    w, _ = world([{"kind": "producer", "user": "bob", "rate": 300_000, "request_bytes": 10_000}])
    w.advance(T0 + 10_000)
    bob = w.clients[0].stats
    assert 290_000 * 10 <= bob.bytes <= 310_000 * 10
    assert bob.throttled == 0
    row = w.meter.rows[("producer_byte_rate", "user=bob")]
    per_broker = [sum(v for (_, br), v in row.amounts.items() if br == b) for b in (1, 2, 3)]
    assert max(per_broker) - min(per_broker) <= 10_000


def test_greedy_producer_sends_at_capacity_and_honours_the_throttle() -> None:
    w, sets = world([{"kind": "greedy-producer", "user": "alice", "rate": 3 * MiB,
                      "request_bytes": 64 * 1024}])
    w.advance(T0 + 1000)
    assert abs(w.clients[0].stats.bytes - 3 * MiB) <= 3 * 64 * 1024
    throttle_alice(sets, T0 + 1000, T0 + 3000)
    w.advance(T0 + 5000)
    entity = "user=alice"
    # requests due at exactly 1 s went before the directive, then one throttled response per
    # connection, then nothing until the throttle ends
    assert produced_between(w, "producer_byte_rate", entity, 1, 2) <= 6 * 64 * 1024
    assert produced_between(w, "producer_byte_rate", entity, 2, 3) == 0
    assert abs(produced_between(w, "producer_byte_rate", entity, 3, 5) - 6 * MiB) <= 6 * 64 * 1024
    stats = w.clients[0].stats
    assert stats.throttled == 3 and stats.max_throttle_ms <= 2000 and stats.held_ms == 0


def test_client_ignoring_throttles_is_held_back_by_the_muted_channel() -> None:
    w, sets = world([{"kind": "ignoring-producer", "user": "alice", "rate": 3 * MiB,
                      "request_bytes": 64 * 1024}])
    w.advance(T0 + 1000)
    throttle_alice(sets, T0 + 1000, T0 + 3000)
    w.advance(T0 + 5000)
    entity = "user=alice"
    assert produced_between(w, "producer_byte_rate", entity, 2, 3) == 0
    stats = w.clients[0].stats
    assert stats.throttled == 3
    # each connection's next request (sent 62.5 ms later) sat unread until the mute ended
    assert 3 * 1850 <= stats.held_ms <= 3 * 2000


def test_greedy_consumer_gets_empty_responses_while_throttled() -> None:
    w, sets = world([{"kind": "greedy-consumer", "user": "alice", "rate": 3 * MiB,
                      "request_bytes": 64 * 1024}])
    throttle_alice(sets, T0, T0 + 2000, "consumer_byte_rate")
    w.advance(T0 + 4000)
    stats = w.clients[0].stats
    assert stats.throttled == 3 and abs(stats.bytes - 6 * MiB) <= 6 * 64 * 1024


def test_connection_storm_round_robins_ips_and_brokers() -> None:
    w, sets = world([{"kind": "connection-storm", "ip": "10.9.0.1", "ips": 4, "rate": 120}],
                    quotas=[{"entity": {"ip": "<default>"}, "quotas": {"connection_creation_rate": 5}}])
    for s in sets.values():
        s.apply({"v": 1, "ts": T0, "scope": "cluster", "broker": None, "entity": {"ip": "10.9.0.2"},
                 "quota": "connection_creation_rate", "action": "close_connection",
                 "throttle_time_ms": 10_000, "until": T0 + 10_000})
    w.advance(T0 + 999)
    stats = w.clients[0].stats
    assert stats.attempts == 120 and stats.closed == 30 and stats.accepted == 90
    row = w.meter.rows[("connection_creation_rate", "ip=<default>")]
    assert row.members == {"10.9.0.1", "10.9.0.2", "10.9.0.3", "10.9.0.4"}
    assert {b for (_, b) in row.amounts} == {1, 2, 3}
    assert w.meter.recent(T0 + 1000, seconds=1)[("connection_creation_rate", "ip=<default>")] == 90 / 4


def test_topic_storm_waits_out_rejections() -> None:
    w, sets = world([{"kind": "topic-storm", "user": "ops", "client_id": "tf", "rate": 10,
                      "partitions": 3, "brokers": [2]}])
    sets[2].apply({"v": 1, "ts": T0, "scope": "cluster", "broker": None,
                   "entity": {"user": "ops", "client_id": "tf"}, "quota": "controller_mutation_rate",
                   "action": "reject", "throttle_time_ms": 500, "until": T0 + 500})
    w.advance(T0 + 999)
    stats = w.clients[0].stats
    # rejected at 0 ms with 500 ms to wait; then every 100 ms from 500 ms on
    assert (stats.requests, stats.rejected, stats.admitted) == (6, 1, 15)


def test_start_and_stop_offsets() -> None:
    w, _ = world([{"kind": "producer", "user": "bob", "rate": 10_000, "request_bytes": 1000,
                   "start": 2, "stop": 4, "brokers": [1]}], brokers=1)
    w.advance(T0 + 10_000)
    row = w.meter.rows[("producer_byte_rate", "user=bob")]
    assert {bucket for (bucket, _) in row.amounts} == {2, 3}
