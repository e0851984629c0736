"""The event timestamps before an offset, read back from Kafka: what a worker that takes a
partition over (`ClockSeeder`) and an audit that starts inside one (`clock_seeds`) seed their
stream clocks with; and a partition's first offset, where a worker reads one its group never
committed from."""

from __future__ import annotations

import asyncio
import uuid

import orjson
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from app.audit.kafka_reads import clock_seeds
from app.audit.session import Progress
from app.kafka.clock_seed import ClockSeeder
from app.kafka.security import PLAINTEXT
from app.kafka.topics import create_topics

pytestmark = pytest.mark.integration
T0 = 1_763_800_000_000


def event(ts: int) -> dict[str, object]:
    return {"type": "request", "v": 1, "ts": ts, "broker": 1, "user": "u", "client_id": "c",
            "api": "Produce", "bytes": 1}


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()


def test_an_audit_reads_back_the_last_five_judged_timestamps_before_its_first_offsets(
        kafka_bootstrap: str) -> None:
    """Only the samples a clock judges count (not a bad record, a bad event or a config), the
    last five of them, oldest first."""
    topic = f"seed.{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(kafka_bootstrap, [(topic, 1, {})]))
    config = {"type": "quota_config", "v": 1, "ts": T0, "entity": {"user": "u"},
              "quotas": {"producer_byte_rate": 1000}}
    values = [orjson.dumps({"type": "batch", "v": 1, "events": [event(T0), event(T0 + 1),
                                                                 {"type": "request"}]}),
              b"{not json", orjson.dumps(config)]
    values += [orjson.dumps(event(T0 + k)) for k in range(2, 6)]
    asyncio.run(produce(kafka_bootstrap, topic, values))
    seeds = clock_seeds(kafka_bootstrap, {(topic, 0): 7}, Progress(quiet=True), PLAINTEXT)
    assert seeds == {(topic, 0): (T0 + 1, T0 + 2, T0 + 3, T0 + 4, T0 + 5)}
    assert clock_seeds(kafka_bootstrap, {(topic, 0): 1}, Progress(quiet=True), PLAINTEXT) == {
        (topic, 0): (T0, T0 + 1)}


def test_a_partitions_first_offset_is_where_its_log_starts_now(kafka_bootstrap: str) -> None:
    """What a worker expects first from a partition its group never committed: 0 for a new
    one, the start retention left for one whose first records were deleted."""
    topic = f"seed.{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(kafka_bootstrap, [(topic, 1, {})]))
    asyncio.run(produce(kafka_bootstrap, topic, [orjson.dumps(event(T0 + k)) for k in range(6)]))

    async def starts() -> tuple[int | None, int | None]:
        seeder = ClockSeeder(kafka_bootstrap)
        try:
            before = await seeder.log_start(topic, 0)
            await delete_before(kafka_bootstrap, TopicPartition(topic, 0), 4)
            return before, await seeder.log_start(topic, 0)
        finally:
            await seeder.stop()

    assert asyncio.run(starts()) == (0, 4)


async def delete_before(bootstrap: str, tp: TopicPartition, offset: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({tp: RecordsToDelete(before_offset=offset)})
    finally:
        await admin.close()
