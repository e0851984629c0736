"""What the audit and `explain` read from Kafka on the driver: the topic list, the config topic,
event topics (`explain`), and the records before a stream's first offset (its clock's seed).

The reading is `app.kafka`'s: the config topic as the admin tools read it (`whole_topic`), event
topics with the Spark data source's planning and reader (`spark_source`), which a big topic
needs (no deadline on the whole read, only on a stalled one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from app.audit.explode import timestamps_ms
from app.audit.options import AuditError
from app.audit.recompute import ConfigEntry, TopicRecord, topic_configs
from app.errors import reason
from app.kafka.security import KafkaSecurity
from app.signing import Signing

if TYPE_CHECKING:  # pragma: no cover
    from app.audit.session import Progress

#: Kafka offsets per Spark task when reading event topics: "never split a partition", because
#: a stream must be read in one task, in order (the skew clock and the config timeline).
WHOLE_PARTITION = str(2**62)

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """A coroutine on a private loop (the driver's code is synchronous)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def existing_topics(bootstrap: str, security: KafkaSecurity, timeout_s: float = 15.0) -> set[str]:
    """Topic names on the cluster, without naming one (a cluster may auto-create it)."""
    from app.kafka.clients import consumer

    async def run() -> set[str]:
        async with consumer(bootstrap, security=security,
                            request_timeout_ms=int(timeout_s * 1000)) as c:
            return set(await c.topics())

    try:
        return _run(asyncio.wait_for(run(), timeout_s + 5))
    except Exception as exc:  # noqa: BLE001 - any connection failure is one line for the user
        raise AuditError(f"cannot reach Kafka at {bootstrap}: {reason(exc)}") from None


def read_configs(bootstrap: str, topic: str, security: KafkaSecurity, signing: Signing
                 ) -> tuple[list[ConfigEntry], list[tuple[str, str]]]:
    """The config topic's configs with their record timestamps, and the records the workers
    would skip (`topic_configs`)."""
    from app.kafka.whole_topic import read_topic

    records = _run(read_topic(bootstrap, topic, security=security))
    return topic_configs(((r.partition, r.offset, r.key, r.value,
                           None if r.timestamp < 0 else r.timestamp) for r in records),
                         topic, signing)


def read_events(bootstrap: str, topic: str, security: KafkaSecurity) -> list[TopicRecord]:
    """`(partition, offset, key, value, timestamp ms)` of a whole event topic, read on the
    driver with the data source's exact planning."""
    from app.kafka.spark_source.offsets import plan_partitions, resolve_ranges
    from app.kafka.spark_source.options import KafkaSourceOptions
    from app.kafka.spark_source.reader import probe_partitions, read_offset_range

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
    return _run(run())


__all__ = ["WHOLE_PARTITION", "clock_seeds", "existing_topics", "read_configs", "read_events"]
