"""The gateway's usage events leave in one record per event kind per flush, keyed by the gateway;
what it drops is counted by reason in its metrics, and a record the producer fails on loses
nothing else."""

from __future__ import annotations

import asyncio

from app.gateway.config import GatewayConfig
from app.gateway.server import Gateway
from app.kafka.security import PLAINTEXT
from app.signing import Signing
from app.subscriber.active_set import ActiveSet
from app.usage.publisher import EventPublisher
from app.usage.records import RecordEncoder
from tests.unit.fake_producer import Producer

T0 = 1_763_800_000_000
TOPICS = {"request": "req", "connection": "conn", "mutation": "mut"}


def gateway(producer: Producer, max_pending: int) -> Gateway:
    """A named gateway with `producer` where `_start_events` would open a Kafka one."""
    gw = Gateway(GatewayConfig(upstream=(("b1", 9092),), listen=("127.0.0.1", 9192),
                               advertised_host="gw", kafka_bootstrap="", topics=TOPICS,
                               kafka_security=PLAINTEXT, signing=Signing(),
                               directives_topic="", gateway_id=5, max_pending=max_pending),
                 directives=ActiveSet(None))
    gw._publisher = EventPublisher(producer, TOPICS,  # type: ignore[arg-type]
                                   RecordEncoder(drops=gw.drops))
    return gw


def metric(gw: Gateway, name: str, **labels: str) -> float:
    return gw.metrics.registry.get_sample_value(f"quota_streams_gateway_{name}", labels) or 0.0


async def test_drops_are_counted_by_reason_and_a_failed_record_loses_only_its_events() -> None:
    producer = Producer(refuse=frozenset({0}))  # the request record
    gw = gateway(producer, max_pending=5)
    for p in range(4):
        gw.usage.request(1 + p % 2, T0, "PLAINTEXT", f"user-{p}", "app", "10.0.0.1", "Produce",
                         100, 0.5, 0.0)
    for i in range(3):  # the second and third are past max_pending
        gw.usage.connection(1, T0, "PLAINTEXT", f"10.0.0.{i}")
    await gw._publish()
    assert [(topic, key) for topic, _, key, _ in producer.sent] == [("conn", b"gateway/5")]
    assert metric(gw, "events_total") == 5
    assert metric(gw, "event_records_total") == 1
    assert metric(gw, "events_dropped_total", reason="send_failed") == 4
    assert metric(gw, "events_dropped_total", reason="buffer_full") == 2
    assert metric(gw, "events_dropped_total", reason="too_large") == 0
    assert metric(gw, "event_send_errors_total") == 1


async def test_a_record_that_fails_in_delivery_is_counted_at_the_next_flush() -> None:
    producer = Producer(undelivered=frozenset({0}))
    gw = gateway(producer, max_pending=100)
    gw.usage.request(1, T0, "PLAINTEXT", "alice", "app", "10.0.0.1", "Produce", 100, 0.5, 0.0)
    await gw._publish()
    await asyncio.gather(*producer.deliveries, return_exceptions=True)  # their callbacks ran
    await gw._publish()
    assert metric(gw, "events_dropped_total", reason="send_failed") == 1
    assert metric(gw, "event_send_errors_total") == 1
