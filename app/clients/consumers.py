"""A consumer in a group, reading a topic from the beginning as fast as it is let, in each client
library. Counted each second: `bytes` (record values) and `records` consumed.

`fetch_bytes` caps what one fetch returns per partition, so a throttled consumer's bursts stay
small next to its quota.
"""

from __future__ import annotations

import asyncio
import time

from app.clients.producers import aiokafka_start, confluent_refusals, kafka_python_start
from app.clients.report import Reporter
from app.clients.security import AuthenticationFailed
from app.kafka.security import KafkaSecurity

#: how long kafka-python's consumer loop rests after a poll that came back empty
POLL_YIELD_S = 0.02
#: the group session timeout the consumers run with unless told: short, so a test's group
#: forms and re-forms quickly
SESSION_TIMEOUT_MS = 6000
#: how long kafka-python's consumer may wait for its group to assign it partitions; its run
#: (and its clock) starts once it has them
JOIN_WAIT_S = 60.0


def consume(library: str, bootstrap: str, topic: str, client_id: str, group: str,
            seconds: float, fetch_bytes: int, reporter: Reporter, security: KafkaSecurity,
            session_timeout_ms: int | None = None) -> None:
    """`session_timeout_ms`: confluent-kafka's group session timeout (None: the module's)."""
    if library == "confluent-kafka":
        _confluent(bootstrap, topic, client_id, group, seconds, fetch_bytes, reporter, security,
                   session_timeout_ms or SESSION_TIMEOUT_MS)
    elif library == "kafka-python":
        _kafka_python(bootstrap, topic, client_id, group, seconds, fetch_bytes, reporter, security)
    elif library == "aiokafka":
        asyncio.run(_aiokafka(bootstrap, topic, client_id, group, seconds, fetch_bytes, reporter,
                              security))
    else:
        raise ValueError(f"unknown library {library!r}")


def _count(reporter: Reporter, values: list[bytes | None]) -> None:
    if values:
        reporter.add("bytes", sum(len(v or b"") for v in values))
        reporter.add("records", len(values))
    else:
        reporter.tick()


def _confluent(bootstrap: str, topic: str, client_id: str, group: str, seconds: float,
               fetch_bytes: int, reporter: Reporter, security: KafkaSecurity,
               session_timeout_ms: int) -> None:
    from confluent_kafka import Consumer

    refused: list[str] = []
    consumer = Consumer({**security.confluent(), **confluent_refusals(refused),
                         "bootstrap.servers": bootstrap, "client.id": client_id,
                         "group.id": group, "auto.offset.reset": "earliest",
                         "session.timeout.ms": session_timeout_ms,
                         "heartbeat.interval.ms": min(3000, session_timeout_ms // 6),
                         "max.partition.fetch.bytes": fetch_bytes,
                         "fetch.max.bytes": max(fetch_bytes, 1024 * 1024)})
    consumer.subscribe([topic])
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if refused:
                raise AuthenticationFailed(refused[0])
            messages = consumer.consume(num_messages=500, timeout=0.2)
            _count(reporter, [m.value() for m in messages if m.error() is None])
    finally:
        consumer.close()


def _kafka_python(bootstrap: str, topic: str, client_id: str, group: str, seconds: float,
                  fetch_bytes: int, reporter: Reporter, security: KafkaSecurity) -> None:
    from kafka import KafkaConsumer

    consumer = kafka_python_start(lambda timeout_ms: KafkaConsumer(
        topic, bootstrap_servers=bootstrap, client_id=client_id, group_id=group,
        auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=1000,
        max_partition_fetch_bytes=fetch_bytes, bootstrap_timeout_ms=timeout_ms,
        **security.kafka_python()))
    try:
        # The join is one poll that may wait for all of it. kafka-python 3.0 gives up on its
        # JoinGroup/SyncGroup task when a poll's timeout ends, and its next poll replaces a task
        # that completed in between with a new JoinGroup: polled with short timeouts it rejoins
        # generation after generation. Its run starts once the group assigned it partitions, so
        # its seconds measure consuming, and how long the join took is in its last line.
        joining = time.monotonic()
        first: list[bytes | None] = []
        while not consumer.assignment():
            left = joining + JOIN_WAIT_S - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"no partitions assigned after {JOIN_WAIT_S:.0f} s")
            batches = consumer.poll(timeout_ms=int(left * 1000), max_records=500)
            first = [r.value for records in batches.values() for r in records]
        reporter.notes["joined_s"] = round(time.monotonic() - joining, 1)
        # the group's generation when it joined: 1 for a group it joined alone in one round
        joined = consumer._coordinator.generation_if_stable()  # kafka-python exposes no other
        reporter.notes["generation"] = joined.generation_id if joined else None
        reporter.restart()
        _count(reporter, first)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            # poll(0): what the network thread has fetched, without waiting in `poll`; the loop
            # rests outside `poll` when nothing came.
            batches = consumer.poll(timeout_ms=0, max_records=500)
            values = [r.value for records in batches.values() for r in records]
            _count(reporter, values)
            if not values:
                time.sleep(POLL_YIELD_S)
    finally:
        consumer.close()


async def _aiokafka(bootstrap: str, topic: str, client_id: str, group: str, seconds: float,
                    fetch_bytes: int, reporter: Reporter, security: KafkaSecurity) -> None:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, client_id=client_id,
                                group_id=group, auto_offset_reset="earliest",
                                session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=1000,
                                max_partition_fetch_bytes=fetch_bytes, **security.aiokafka())
    await aiokafka_start(consumer)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200, max_records=500)
            _count(reporter, [r.value for records in batches.values() for r in records])
    finally:
        await consumer.stop()
