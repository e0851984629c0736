"""What the audit and `explain` read from Kafka on the driver: the topic list, whole topics,
and the records before a stream's first offset (its clock's seed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.audit.options import AuditError
from app.audit.recompute import TopicRecord, timestamps_ms
from app.errors import reason
from app.kafka.security import KafkaSecurity

if TYPE_CHECKING:  # pragma: no cover
    from app.audit.session import Progress

#: Kafka offsets per Spark task when reading event topics: "never split a partition", because
#: a stream must be read in one task, in order (the skew clock and the config timeline).
WHOLE_PARTITION = str(2**62)


def existing_topics(bootstrap: str, security: KafkaSecurity, timeout_s: float = 15.0) -> set[str]:
    """Topic names on the cluster, without naming one (a cluster may auto-create it)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    async def run() -> set[str]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False,
                                    request_timeout_ms=int(timeout_s * 1000),
                                    **security.aiokafka())
        try:  # stopped even when the start fails, or aiokafka warns of an unclosed consumer
            await consumer.start()
            return set(await consumer.topics())
        finally:
            await consumer.stop()

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(run(), timeout_s + 5))
    except Exception as exc:  # noqa: BLE001 - any connection failure is one line for the user
        raise AuditError(f"cannot reach Kafka at {bootstrap}: {reason(exc)}") from None
    finally:
        loop.close()


def read_topic_local(bootstrap: str, topic: str, security: KafkaSecurity) -> list[TopicRecord]:
    """`(partition, offset, key, value, timestamp ms)` of a whole topic, read on the driver
    (small topics: configs, a control topic for `explain`), with the data source's exact
    planning."""
    from app.kafka.spark_source import (
        KafkaSourceOptions,
        plan_partitions,
        probe_partitions,
        read_offset_range,
        resolve_ranges,
    )

    opts = KafkaSourceOptions.from_options({"bootstrap": bootstrap, "topics": topic,
                                            "max_records_per_partition": WHOLE_PARTITION,
                                            **security.options()})
    earliest, latest = probe_partitions(opts)
    out: list[TopicRecord] = []
    for part in plan_partitions(resolve_ranges(earliest, latest), 2**62):
        for batch in read_offset_range(opts, part):
            out.extend(zip(batch.column("partition").to_pylist(),
                           batch.column("offset").to_pylist(), batch.column("key").to_pylist(),
                           batch.column("value").to_pylist(),
                           timestamps_ms(batch.column("timestamp"))))
    return out


def clock_seeds(bootstrap: str, starts: dict[tuple[str, int], int], progress: Progress,
                security: KafkaSecurity) -> dict[Any, tuple[int, ...]]:
    """The event timestamps before each of `starts` (the first offset read of a stream read
    from past its log start), read back as a worker that takes a partition over reads them
    (`app.kafka.clock_seed`): each stream's clock then judges as the workers' did there."""
    import asyncio

    from app.kafka.clock_seed import ClockSeeder

    async def run() -> dict[Any, tuple[int, ...]]:
        seeder = ClockSeeder(bootstrap, security=security)
        found: dict[Any, tuple[int, ...]] = {}
        try:
            for (topic, partition), start in sorted(starts.items()):
                stamps = await seeder.timestamps(topic, partition, start)
                if stamps is None:
                    progress.step(f"note: could not read the records before {topic}/"
                                  f"{partition}@{start}; its stream clock starts empty")
                elif stamps:
                    found[(topic, partition)] = tuple(stamps)
        finally:
            await seeder.stop()
        return found

    if not starts:
        return {}
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


__all__ = ["WHOLE_PARTITION", "clock_seeds", "existing_topics", "read_topic_local"]
