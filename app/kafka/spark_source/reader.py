"""The data source's broker side: each partition's log start and end (on the driver), and a
planned offset range read into Arrow batches (in an executor)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from app.kafka.spark_source.offsets import TP, OffsetRange
from app.kafka.spark_source.options import KafkaSourceOptions

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = ["SCHEMA_DDL", "arrow_schema", "probe_partitions", "read_offset_range"]

#: the rows' schema: Spark's own Kafka source's, minus headers
SCHEMA_DDL = (
    "topic string, partition int, offset long, timestamp timestamp, key binary, value binary"
)


def arrow_schema() -> pa.Schema:
    """The Arrow schema of the batches `read_offset_range` yields (`SCHEMA_DDL` in Arrow).

    The timestamp must be `timestamp("us", tz="UTC")`: Spark's TimestampType is microseconds
    since the epoch in UTC, and a naive or millisecond type is rejected or shifted.
    """
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("us", tz="UTC")),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
        ]
    )


def _consumer_kwargs(opts: KafkaSourceOptions) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "bootstrap_servers": opts.bootstrap,
        "group_id": None,  # assign(), no group: nothing is committed, no rebalances
        "enable_auto_commit": False,
        "auto_offset_reset": "none",  # a missing offset must fail, never silently jump
        "request_timeout_ms": opts.request_timeout_ms,
        "fetch_max_bytes": 64 * 1024 * 1024,
        "max_partition_fetch_bytes": 8 * 1024 * 1024,
        "fetch_max_wait_ms": 100,
        "client_id": "quota-audit-spark",
        **opts.security.aiokafka(),
    }
    kwargs.update(opts.consumer_config)
    return kwargs


def _run(coro: Any) -> Any:
    """Run a coroutine on a private loop: Spark's Python workers have no running loop, and a
    fresh loop per call keeps aiokafka's state from leaking between reads in a reused worker."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


async def _probe(opts: KafkaSourceOptions) -> tuple[dict[TP, int], dict[TP, int]]:
    from aiokafka import AIOKafkaConsumer

    from app.kafka.clients import partitions_of

    consumer = AIOKafkaConsumer(**{**_consumer_kwargs(opts), "max_partition_fetch_bytes": 65536})
    await consumer.start()
    try:
        # All-topics metadata: asking for a named topic may make the cluster create it.
        existing = await consumer.topics()
        missing = [t for t in opts.topics if t not in existing]
        if missing:
            raise ValueError(
                f"topics not found on {opts.bootstrap}: {', '.join(missing)} "
                f"(existing: {', '.join(sorted(existing)) or 'none'})"
            )
        tps = [tp for topic in opts.topics for tp in await partitions_of(consumer, topic)]
        if not tps:
            return {}, {}
        consumer.assign(tps)
        earliest = await consumer.beginning_offsets(tps)
        # with isolation_level=read_committed the broker answers the last stable offset:
        # records past it are not delivered yet, and a range planned beyond it would stall
        ends = await consumer.end_offsets(tps)
        return (
            {(tp.topic, tp.partition): int(earliest[tp]) for tp in tps},
            {(tp.topic, tp.partition): int(ends[tp]) for tp in tps},
        )
    finally:
        await consumer.stop()


def probe_partitions(opts: KafkaSourceOptions) -> tuple[dict[TP, int], dict[TP, int]]:
    """`(log start, end)` of every partition of `opts.topics`, on the driver."""
    return _run(_probe(opts))  # type: ignore[no-any-return]


def _batch(
    topic: str, partition: int, offsets: list[int], stamps: list[int],
    keys: list[bytes | None], values: list[bytes | None], opts: KafkaSourceOptions,
) -> pa.RecordBatch:
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(offsets)
    ts_ms = pa.array(stamps, pa.int64())
    if n and pc.min(ts_ms).as_py() < 0:  # -1: the record has no timestamp (pre-0.10 format)
        ts_ms = pc.if_else(pc.less(ts_ms, 0), pa.scalar(None, pa.int64()), ts_ms)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(offsets, pa.int64()),
            pc.multiply(ts_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
        ],
        schema=arrow_schema(),
    )
    if opts.start_ts_ms is None and opts.end_ts_ms is None:
        return batch
    mask = None
    if opts.start_ts_ms is not None:
        mask = pc.greater_equal(ts_ms, opts.start_ts_ms)
    if opts.end_ts_ms is not None:
        upper = pc.less(ts_ms, opts.end_ts_ms)
        mask = upper if mask is None else pc.and_(mask, upper)
    return batch.filter(pc.fill_null(mask, False))


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while a fetch turns into Python objects.

    aiokafka builds one GC-tracked `ConsumerRecord` per record; tens of thousands of them alive
    at once trigger repeated full collections that cost more than the fetch. They hold no cycles and die by reference counting, so nothing leaks; the GC is back on
    before control returns to Spark.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_offset_range(opts: KafkaSourceOptions, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches with exactly the records of `part` (offsets `[start, end)`).

    Runs in the executor with its own event loop. The loop only runs while a batch is being
    fetched, so nothing in aiokafka is touched while Spark consumes a yielded batch. Records
    below the start (a fetch returns whole broker batches) and at or past the end are dropped.
    Offsets may have gaps (compaction, transaction markers), so completion is decided by the
    consumer's position, not by counting; a range that stops advancing for `idle_timeout_s`
    raises rather than returning short.
    """
    if part.end <= part.start:
        return
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def open_consumer() -> Any:
        # aiokafka binds a consumer (and assign()'s state) to the running loop.
        consumer = AIOKafkaConsumer(**_consumer_kwargs(opts))
        await consumer.start()
        consumer.assign([tp])
        consumer.seek(tp, part.start)
        return consumer

    loop = asyncio.new_event_loop()
    tp = TopicPartition(part.topic, part.partition)
    consumer = None
    try:
        consumer = loop.run_until_complete(open_consumer())
        next_offset = part.start
        offsets: list[int] = []
        stamps: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        last_progress = time.monotonic()
        while next_offset < part.end:
            before = next_offset
            with _gc_paused():
                fetched = loop.run_until_complete(
                    consumer.getmany(tp, timeout_ms=200, max_records=opts.batch_rows)
                )
                records = fetched.get(tp) or []
                if records and (
                    records[0].offset < next_offset or records[-1].offset >= part.end
                ):
                    records = [r for r in records if next_offset <= r.offset < part.end]
                if records:  # comprehensions, not a per-record loop: this is the hot path
                    offsets.extend([r.offset for r in records])
                    stamps.extend([r.timestamp for r in records])
                    keys.extend([r.key for r in records])
                    values.extend([r.value for r in records])
                    next_offset = records[-1].offset + 1
                del fetched, records
            position = loop.run_until_complete(consumer.position(tp))
            if position > next_offset:  # skipped offsets: compaction gaps, control records
                next_offset = min(position, part.end)
            if next_offset > before:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > opts.idle_timeout_s:
                raise TimeoutError(
                    f"{part.topic}/{part.partition}: stuck at offset {next_offset} of "
                    f"[{part.start}, {part.end}) for {opts.idle_timeout_s}s; the planned end "
                    "is not there (broker restarted or data deleted?)"
                )
            if len(offsets) >= opts.batch_rows or (next_offset >= part.end and offsets):
                yield _batch(part.topic, part.partition, offsets, stamps, keys, values, opts)
                offsets, stamps, keys, values = [], [], [], []
    finally:
        try:
            if consumer is not None:
                loop.run_until_complete(consumer.stop())
        finally:
            loop.close()
