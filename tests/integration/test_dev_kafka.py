"""The development Kafka cluster: lifecycle, clear errors, SASL and TLS listeners, three nodes,
topic creation and end offsets."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from app.kafka.topics import TopicMismatchError, create_topics, create_topics_sync
from app.devstack.kafka import ClusterError, KafkaCluster, broker_count
from app.kafka.offsets import EndOffsetError, end_offsets

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


def test_a_cluster_starts_serves_and_stops_without_a_trace(tmp_path: Path) -> None:
    cluster = KafkaCluster(work_dir=None)
    with cluster:
        assert cluster.running
        host, port = cluster.bootstrap().split(":")
        assert host == "127.0.0.1" and broker_count(host, int(port)) == 1
        pids = [node.proc.pid for node in cluster.nodes if node.proc is not None]
        work = cluster.work_dir
    assert not cluster.running and pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):  # terminated and reaped
            os.kill(pid, 0)
    assert work is not None and not work.exists()
    cluster.stop()  # idempotent


def test_missing_jars_give_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv("QS_KAFKA_LIBS", str(tmp_path))
    with pytest.raises(ClusterError, match="make setup"):
        KafkaCluster().start()


def test_a_node_that_cannot_start_gives_its_log(tmp_path: Path) -> None:
    cluster = KafkaCluster(work_dir=tmp_path, broker_config={"num.io.threads": "none"},
                           startup_timeout=60)
    with pytest.raises(ClusterError, match="num.io.threads"):
        cluster.start()
    assert not cluster.running


async def test_sasl_users_authenticate_and_a_wrong_password_is_refused(
        kafka_cluster: KafkaCluster, caplog: pytest.LogCaptureFixture) -> None:
    """Each mechanism on both SASL listeners, as the per-user quotas' principals need."""
    from aiokafka.errors import KafkaConnectionError
    from aiokafka.helpers import create_ssl_context

    assert kafka_cluster.ca is not None
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        tls = create_ssl_context(cafile=str(kafka_cluster.ca)) if listener == "SASL_SSL" else None
        for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            for password in (kafka_cluster.passwords["alice"], "wrong"):
                producer = AIOKafkaProducer(
                    bootstrap_servers=kafka_cluster.bootstrap(listener),
                    security_protocol=listener, ssl_context=tls, sasl_mechanism=mechanism,
                    sasl_plain_username="alice", sasl_plain_password=password)
                try:
                    if password == "wrong":
                        caplog.clear()
                        with pytest.raises(KafkaConnectionError):
                            await producer.start()
                        assert "SaslAuthenticationFailed" in caplog.text
                    else:
                        await producer.start()
                        await producer.send_and_wait(_topic("sasl"), b"x")
                finally:
                    await producer.stop()


def test_three_nodes_lead_partitions_on_different_brokers(kafka_cluster3: KafkaCluster
                                                          ) -> None:
    from kafka import KafkaAdminClient

    topic = _topic("spread")
    bootstrap = kafka_cluster3.bootstrap()
    create_topics_sync(bootstrap, [(topic, 6, {})], replication_factor=3)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        assert len(admin.describe_cluster()["brokers"]) == 3
        # the node asked may list a topic created a moment ago without its partitions yet
        deadline = time.monotonic() + 30
        while True:
            partitions = [p for t in admin.describe_topics([topic]) for p in t["partitions"]]
            if len(partitions) == 6 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        admin.close()
    assert {p["leader_id"] for p in partitions} == {1, 2, 3}


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


async def test_end_offsets_are_exact(kafka_bootstrap: str) -> None:
    """Several batches on one partition, one small batch on another, one empty partition."""
    topic = _topic("ends")
    await create_topics(kafka_bootstrap, [(topic, 3, {})])
    await _produce_batches(kafka_bootstrap, topic, 0, batches=5, per_batch=100)
    await _produce_batches(kafka_bootstrap, topic, 1, batches=1, per_batch=7)
    tps = [TopicPartition(topic, p) for p in range(3)]
    ends = await end_offsets(kafka_bootstrap, tps)
    assert ends == {tps[0]: 500, tps[1]: 7, tps[2]: 0}
    # Keys come back as given (Faust TPs, plain tuples...).
    assert await end_offsets(kafka_bootstrap, [(topic, 0)]) == {(topic, 0): 500}


async def test_end_offsets_time_out_clearly(kafka_bootstrap: str) -> None:
    with pytest.raises(EndOffsetError, match="could not read the end offsets"):
        # Partition 9 of a 1-partition topic never gets a leader.
        topic = _topic("tiny")
        await create_topics(kafka_bootstrap, [(topic, 1, {})])
        await end_offsets(kafka_bootstrap, [(topic, 9)], timeout=1.0)
