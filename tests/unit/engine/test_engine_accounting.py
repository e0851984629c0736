"""`served` accounting: every reported event counts; `kafka` keeps Kafka's take-backs."""

from __future__ import annotations

from typing import Any

from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import parse_event

T0 = 1_763_800_000_000


def engine(accounting: str, *configs: dict[str, Any]) -> QuotaEngine:
    e = QuotaEngine(EngineSettings(accounting=accounting))
    for c in configs:
        e.process(parse_event({"type": "quota_config", "v": 1, "ts": 0, **c}))
    return e


def connect(e: QuotaEngine, ts: int) -> list[Any]:
    decisions, _ = e.process(parse_event({"type": "connection", "v": 1, "ts": ts, "broker": 1,
                                          "listener": "EXTERNAL", "ip": "10.0.0.1"}))
    return [d for d in decisions if d.quota == "connection_creation_rate"]


IP_QUOTA = {"entity": {"ip": "<default>"}, "quotas": {"connection_creation_rate": 2}}


def test_kafka_accounting_takes_a_closed_connection_back_and_caps_the_throttle() -> None:
    e = engine("kafka", IP_QUOTA)
    throttles = [connect(e, T0)[0].throttle_time_ms for _ in range(40)]
    assert throttles[:20] == [0] * 20  # 20 connections = 2/s over the 10 s minimum window
    assert all(0 < t <= 1000 for t in throttles[20:])  # capped at one window
    # every over-rate connection was taken back out: the window still holds exactly 20
    assert connect(e, T0)[0].observed * 10 == 21


def test_served_accounting_keeps_every_connection_and_throttles_until_back_under() -> None:
    e = engine("served", IP_QUOTA)
    throttles = [connect(e, T0)[0].throttle_time_ms for _ in range(40)]
    assert throttles[:20] == [0] * 20
    assert throttles[-1] == round((40 - 20) / 20 * 10000)  # uncapped: (O-T)/T*W
    assert connect(e, T0)[0].observed * 10 == 41


def fetch(e: QuotaEngine, ts: int, nbytes: int) -> tuple[Any, ...]:
    decisions, _ = e.process(parse_event({"type": "request", "v": 1, "ts": ts, "broker": 1,
                                          "user": "u", "client_id": "c", "api": "Fetch",
                                          "bytes": nbytes}))
    return tuple(d for d in decisions if d.quota == "consumer_byte_rate")


BYTE_QUOTA = {"entity": {"user": "u"}, "quotas": {"consumer_byte_rate": 100}}


def test_throttled_fetch_bytes_are_taken_back_only_in_kafka_accounting() -> None:
    kafka, served = engine("kafka", BYTE_QUOTA), engine("served", BYTE_QUOTA)
    for e in (kafka, served):
        assert fetch(e, T0, 5000)[0].throttle_time_ms > 0
    assert fetch(kafka, T0, 0)[0].observed == 0.0  # the empty response took the bytes back
    assert fetch(served, T0, 0)[0].observed == 500.0  # 5000 B over the 10 s window


def mutate(e: QuotaEngine, ts: int) -> Any:
    decisions, _ = e.process(parse_event({"type": "mutation", "v": 1, "ts": ts, "broker": 1,
                                          "user": "ops", "client_id": "tf", "api": "CreateTopics",
                                          "api_version": 7, "partitions": 30}))
    return decisions[0]


MUTATION_QUOTA = {"entity": {"user": "ops"}, "quotas": {"controller_mutation_rate": 2}}


def test_strict_mutation_in_debt_is_charged_only_in_served_accounting() -> None:
    kafka = engine("kafka", MUTATION_QUOTA)
    served = engine("served", MUTATION_QUOTA)
    for e in (kafka, served):
        assert mutate(e, T0).action == "none"  # 22 tokens - 30 = -8: admitted, in debt
    rejected_kafka, rejected_served = mutate(kafka, T0), mutate(served, T0)
    assert rejected_kafka.action == rejected_served.action == "reject"
    assert rejected_kafka.throttle_time_ms == rejected_served.throttle_time_ms == 4000  # 8/2 s
    assert rejected_kafka.observed == -8.0  # the rejected request was not charged
    assert rejected_served.observed == -38.0  # the broker admitted its 30 partitions
