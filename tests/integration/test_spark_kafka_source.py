"""The `quota_kafka` Spark data source against a local Kafka: every record exactly once.

The data is produced in several batches per partition, so ranges start and end inside and
between broker batches. One Spark session and one produced topic serve all tests.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.spark_fixtures import spark
except ImportError:  # pragma: no cover
    from spark_fixtures import spark  # type: ignore[no-redef]  # noqa: F401

from app.kafka.spark_source.options import KafkaSourceOptions
from app.kafka.spark_source.reader import probe_partitions
from app.kafka.spark_source.source import KafkaDataSource
from app.kafka.topics import create_topics

pytestmark = [pytest.mark.spark, pytest.mark.integration]

N_RECORDS = 20_000
N_PARTITIONS = 3
N_BATCHES = 5
BASE_TS = 1_763_800_000_000


def expected_record(i: int) -> tuple[int, bytes, bytes, int]:
    """(partition, key, value, timestamp ms) of the i-th produced record."""
    value = json.dumps({"type": "request", "v": 1, "ts": BASE_TS + i, "i": i}).encode()
    return i % N_PARTITIONS, f"k{i % 97}".encode(), value, BASE_TS + i


async def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes, int]]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        step = max(len(records) // N_BATCHES, 1)
        for first in range(0, len(records), step):  # separate flushes: several broker batches
            futures = [
                await producer.send(topic, value=v, key=k, partition=p, timestamp_ms=ts)
                for p, k, v, ts in records[first : first + step]
            ]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()


@pytest.fixture(scope="module")
def events_topic(kafka_bootstrap: str) -> str:
    """A 3-partition topic holding N_RECORDS records produced in N_BATCHES flushes."""
    topic = f"audit.src.{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(kafka_bootstrap, [(topic, N_PARTITIONS, {})]))
    asyncio.run(_produce(kafka_bootstrap, topic, [expected_record(i) for i in range(N_RECORDS)]))
    return topic


@pytest.fixture(scope="module")
def small_topic(kafka_bootstrap: str) -> str:
    """A 2-partition topic with 10 records in partition 0 and an empty partition 1."""
    topic = f"audit.small.{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(kafka_bootstrap, [(topic, 2, {})]))
    asyncio.run(
        _produce(kafka_bootstrap, topic, [(0, b"s", b"%d" % i, BASE_TS + i) for i in range(10)])
    )
    return topic


@pytest.fixture(scope="module")
def source(spark):  # type: ignore[no-untyped-def]
    spark.dataSource.register(KafkaDataSource)
    return spark


def reader(spark, bootstrap: str, topics: str, **options: str):  # type: ignore[no-untyped-def]
    read = spark.read.format("quota_kafka").option("bootstrap", bootstrap).option("topics", topics)
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def test_the_planner_covers_every_partition_from_its_start_to_its_end(
    kafka_bootstrap: str, events_topic: str
) -> None:
    opts = KafkaSourceOptions.from_options({"bootstrap": kafka_bootstrap, "topics": events_topic})
    earliest, latest = probe_partitions(opts)
    assert sorted(latest) == [(events_topic, p) for p in range(N_PARTITIONS)]
    assert sum(latest.values()) - sum(earliest.values()) == N_RECORDS


def test_reads_every_record_exactly_once_and_values_round_trip(
    source, kafka_bootstrap: str, events_topic: str  # type: ignore[no-untyped-def]
) -> None:
    df = reader(source, kafka_bootstrap, events_topic, max_records_per_partition="2500")
    assert df.rdd.getNumPartitions() == 9  # 3 partitions of ~6.7k, chunks of <= 2500
    rows = df.collect()
    assert len(rows) == N_RECORDS
    assert len({(r.topic, r.partition, r.offset) for r in rows}) == N_RECORDS
    seen = set()
    for row in rows:
        doc = json.loads(row.value)
        partition, key, value, ts = expected_record(doc["i"])
        assert (row.partition, bytes(row.key), bytes(row.value)) == (partition, key, value)
        assert int(row.timestamp.timestamp() * 1000) == ts
        seen.add(doc["i"])
    assert seen == set(range(N_RECORDS))
    # Spark-side aggregation agrees (the count runs through the same reader, not the driver).
    assert df.select("topic", "partition", "offset").distinct().count() == N_RECORDS


def test_offset_bounds(source, kafka_bootstrap: str, events_topic: str) -> None:  # type: ignore[no-untyped-def]
    start = {events_topic: {"0": 100, "1": -2, "2": 6000}}
    end = {events_topic: {"0": 250, "1": 40, "2": -1}}
    df = reader(
        source, kafka_bootstrap, events_topic,
        starting_offsets=json.dumps(start), ending_offsets=json.dumps(end),
        max_records_per_partition="64",
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    size_2 = sum(1 for i in range(N_RECORDS) if i % N_PARTITIONS == 2)
    expected = (
        [(0, o) for o in range(100, 250)]
        + [(1, o) for o in range(40)]
        + [(2, o) for o in range(6000, size_2)]
    )
    assert got == expected


def test_time_bounds_filter_by_record_timestamp(
    source, kafka_bootstrap: str, events_topic: str  # type: ignore[no-untyped-def]
) -> None:
    df = reader(
        source, kafka_bootstrap, events_topic,
        start_ts_ms=str(BASE_TS + 1000), end_ts_ms=str(BASE_TS + 1500),
    )
    got = sorted(json.loads(r.value)["i"] for r in df.select("value").collect())
    assert got == list(range(1000, 1500))


def test_several_topics_and_an_empty_partition(
    source, kafka_bootstrap: str, events_topic: str, small_topic: str  # type: ignore[no-untyped-def]
) -> None:
    df = reader(source, kafka_bootstrap, f"{events_topic},{small_topic}")
    counts = {(r.topic, r.partition): r["count"] for r in df.groupBy("topic", "partition").count().collect()}
    assert counts[(small_topic, 0)] == 10
    assert (small_topic, 1) not in counts
    assert sum(c for (t, _p), c in counts.items() if t == events_topic) == N_RECORDS
    empty = reader(source, kafka_bootstrap, small_topic, starting_offsets="latest")
    assert empty.count() == 0


def test_missing_topic_is_an_error_and_is_not_created(
    source, kafka_bootstrap: str  # type: ignore[no-untyped-def]
) -> None:
    name = f"audit.missing.{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception, match="topics not found"):
        reader(source, kafka_bootstrap, name).count()
    opts = KafkaSourceOptions.from_options({"bootstrap": kafka_bootstrap, "topics": name})
    with pytest.raises(ValueError, match="not found"):  # still absent: no auto-creation
        probe_partitions(opts)


def test_stream_available_now_reads_each_record_once_across_runs(
    source, kafka_bootstrap: str, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    topic = f"audit.stream.{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(kafka_bootstrap, [(topic, 2, {})]))
    first = [(i % 2, b"k", b"%d" % i, BASE_TS + i) for i in range(3000)]
    second = [(i % 2, b"k", b"%d" % i, BASE_TS + i) for i in range(3000, 4000)]
    asyncio.run(_produce(kafka_bootstrap, topic, first))
    checkpoint, output = str(tmp_path / "ckpt"), str(tmp_path / "out")

    def run_once() -> None:
        stream = (
            source.readStream.format("quota_kafka")
            .option("bootstrap", kafka_bootstrap)
            .option("topics", topic)
            .option("starting_offsets", "earliest")
            .option("max_records_per_trigger", "1200")
            .load()
        )
        query = (
            stream.writeStream.format("parquet")
            .option("checkpointLocation", checkpoint)
            .option("path", output)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run_once()
    assert source.read.parquet(output).count() == 3000
    asyncio.run(_produce(kafka_bootstrap, topic, second))
    run_once()
    out = source.read.parquet(output)
    assert out.count() == 4000
    assert out.select("partition", "offset").distinct().count() == 4000
    values = {int(r.value) for r in out.select("value").collect()}
    assert values == set(range(4000))
