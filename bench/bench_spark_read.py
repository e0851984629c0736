"""Benchmark: rows/s reading Kafka records into Spark through the `quota_kafka` data source.

Why: the audit replays whole event topics; this says how long a replay of N records takes and
whether a change to the reader (batch size, chunking) helps. It produces N ~100-byte JSON
request events to a fresh topic (on a local Kafka unless --bootstrap is given), then
times full scans with a Spark action that touches every row, and prints rows/s per run and the
median. The first scan also warms up Spark's Python workers, so it is reported but not counted.

    python bench/bench_spark_read.py --records 1000000 --partitions 8 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000, help="records to produce and read")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the topic")
    parser.add_argument("--runs", type=int, default=3, help="timed scans after the warm-up scan")
    parser.add_argument(
        "--max-records-per-partition", type=int, default=250_000,
        help="chunk size of the planner (Spark tasks = ceil(partition size / this) per partition)",
    )
    parser.add_argument("--batch-rows", type=int, default=20_000, help="rows per Arrow batch")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    parser.add_argument(
        "--jvm-options", default="-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        help="driver/executor JVM flags (default: the tests' fast-start flags; the JVM's "
        "default JIT measured no faster on 1M-record scans)",
    )
    parser.add_argument(
        "--bootstrap", default="", help="existing cluster host:port (default: a local Kafka)"
    )
    return parser.parse_args(argv)


async def produce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    """Create the topic explicitly (with its partition count) and fill it fast."""
    from aiokafka import AIOKafkaProducer

    from app.kafka.topics import create_topics

    await create_topics(bootstrap, [(topic, partitions, {})])
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20
    )
    await producer.start()
    try:
        base = int(time.time() * 1000)
        chunk = 20_000
        for first in range(0, records, chunk):
            futures = []
            for i in range(first, min(first + chunk, records)):
                value = (
                    b'{"type":"request","v":1,"ts":%d,"broker":1,"user":"u%d",'
                    b'"client_id":"c","api":"Produce","bytes":%d}' % (base + i, i % 1000, i)
                )
                futures.append(await producer.send(topic, value=value, partition=i % partitions))
            await asyncio.gather(*futures)
    finally:
        await producer.stop()


def scan(spark, bootstrap: str, topic: str, args: argparse.Namespace) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """One full scan; `count()` alone could be answered without materialising values, so the
    action aggregates over the value bytes to force every row through the reader."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    df = (
        spark.read.format("quota_kafka")
        .option("bootstrap", bootstrap)
        .option("topics", topic)
        .option("max_records_per_partition", str(args.max_records_per_partition))
        .option("batch_rows", str(args.batch_rows))
        .load()
    )
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
    return int(row["n"]), time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from app.kafka.spark_source.source import KafkaDataSource
    from app.devstack.kafka import KafkaCluster

    broker = None
    bootstrap = args.bootstrap
    if not bootstrap:
        broker = KafkaCluster().start()
        bootstrap = broker.bootstrap()
    try:
        topic = f"bench.read.{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        asyncio.run(produce(bootstrap, topic, args.records, args.partitions))
        print(f"produced {args.records} records in {time.perf_counter() - started:.1f}s")

        sys.path.insert(0, str(ROOT / "tests" / "integration"))
        from spark_fixtures import build_session

        spark = build_session("bench-spark-read", master=args.master, jvm_options=args.jvm_options)
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(KafkaDataSource)
        rates = []
        for run in range(args.runs + 1):
            count, seconds = scan(spark, bootstrap, topic, args)
            if count != args.records:
                print(f"ERROR: read {count} records, produced {args.records}", file=sys.stderr)
                return 1
            label = "warm-up" if run == 0 else f"run {run}"
            print(f"{label}: {count} rows in {seconds:.2f}s = {count / seconds:,.0f} rows/s")
            if run:
                rates.append(count / seconds)
        if rates:
            print(f"median: {statistics.median(rates):,.0f} rows/s")
        spark.stop()
        return 0
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    raise SystemExit(main())
