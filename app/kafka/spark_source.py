"""Read Kafka topics into Spark without a connector jar: a PySpark Python Data Source.

Why this exists: Spark's own Kafka source is a connector jar that PySpark's wheel does not ship
(`spark.read.format("kafka")` fails with KAFKA_DATA_SOURCE_NOT_ENABLED). Spark 4's Python Data
Source API lets a Python client (aiokafka) do the reading inside the executors, with the
project's own Kafka security settings, and returning Arrow record batches keeps it fast.

Usage::

    from app.kafka.spark_source import KafkaDataSource
    spark.dataSource.register(KafkaDataSource)
    df = (spark.read.format("quota_kafka")
          .option("bootstrap", "127.0.0.1:9092")
          .option("topics", "quota.events.request,quota.events.mutation")
          .option("starting_offsets", "earliest")          # or JSON, see below
          .option("ending_offsets", "latest")
          .load())

The schema is the one Spark's own Kafka source uses, minus headers:
`topic string, partition int, offset long, timestamp timestamp, key binary, value binary`.

Options (names are case-insensitive; Spark-style camelCase aliases are accepted):

- `bootstrap` (required): `host:port[,host:port]`.
- `topics` (required): comma-separated topic names. A topic that does not exist is an error
  (asking a broker for its metadata would make a cluster that auto-creates topics create it).
- `starting_offsets` / `ending_offsets`: `earliest`, `latest`, or JSON as in Spark's Kafka
  source, `{"topic": {"0": 1200, "1": -2}}`, where -2 means earliest and -1 latest. Partitions
  missing from the JSON use earliest (start) / latest (end). Defaults: earliest / latest for batch
  reads, latest for streams. Starts are inclusive, ends exclusive.
- `start_ts_ms` / `end_ts_ms`: keep only records whose timestamp (epoch ms) is in
  `[start_ts_ms, end_ts_ms)`. Filtered in the reader, after fetching (the planned offset ranges
  are not narrowed from the timestamps).
- `max_records_per_partition` (default 500000): offset ranges larger than this are split into
  equal chunks, one Spark task each, so a big partition does not serialise the job.
- `fail_on_data_loss` (default true): a requested start below the partition's log start (the
  records were deleted) is an error, because a job that silently skips records is wrong.
  With false the range starts at the log start instead.
- `batch_rows` (default 20000): rows per Arrow batch handed to Spark.
- `idle_timeout_s` (default 30): a read that makes no progress for this long fails instead of
  hanging or returning fewer records than planned.
- `max_records_per_trigger` (streaming only): cap on rows per micro-batch.

Planning happens on the driver: the partitions of each topic, their log start and their end.
Planning never trusts the end the reader sees: a task reads exactly `[start, end)` of its
(topic, partition) and fails if it cannot, so every record in the planned ranges is returned
exactly once.

The planning arithmetic (`parse_offsets`, `resolve_ranges`, `plan_partitions`,
`cap_offsets`) is pure and importable without pyspark, so it is unit-tested without a JVM.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from app.kafka.security import KafkaSecurity

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

try:  # pyspark (the `audit` extra) is optional: the planning must import without it
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
    )

    HAVE_PYSPARK = True
except ImportError:  # pragma: no cover - exercised only where pyspark is absent
    HAVE_PYSPARK = False

    class InputPartition:  # type: ignore[no-redef]
        """Stand-in so `OffsetRange` (and the planning tests) work without pyspark."""

    DataSource = DataSourceReader = DataSourceStreamReader = object  # type: ignore[misc,assignment]

__all__ = [
    "EARLIEST",
    "LATEST",
    "SCHEMA_DDL",
    "SOURCE_NAME",
    "TP",
    "KafkaDataSource",
    "KafkaSourceOptions",
    "OffsetRange",
    "arrow_schema",
    "cap_offsets",
    "parse_offsets",
    "plan_partitions",
    "probe_partitions",
    "read_offset_range",
    "resolve_ranges",
]

SOURCE_NAME = "quota_kafka"
SCHEMA_DDL = (
    "topic string, partition int, offset long, timestamp timestamp, key binary, value binary"
)
#: Spark's Kafka source convention for per-partition offsets in the JSON option.
EARLIEST = -2
LATEST = -1

TP = tuple[str, int]
#: "earliest", "latest", or {(topic, partition): offset or EARLIEST/LATEST}.
OffsetSpec = Literal["earliest", "latest"] | dict[TP, int]


def arrow_schema() -> pa.Schema:
    """The Arrow schema of the batches `read` yields.

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


# -- pure planning ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark input partition: offsets `[start, end)` of one (topic, partition).

    A plain picklable value: it travels from the planner to an executor.
    """

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        """Offsets in the range (records, unless the log has gaps from compaction/markers)."""
        return self.end - self.start


def parse_offsets(raw: str | None, *, default: Literal["earliest", "latest"]) -> OffsetSpec:
    """Parse a `starting_offsets` / `ending_offsets` option value.

    Accepts `earliest`, `latest` or Spark's JSON form `{"topic": {"0": 42, "1": -2}}` so a job
    written for Spark's Kafka source keeps its options. Raises `ValueError` on anything else.
    """
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return "earliest" if text.lower() == "earliest" else "latest"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"offsets must be 'earliest', 'latest' or JSON like {{\"topic\": {{\"0\": 42}}}}: "
            f"{exc}"
        ) from None
    # ValueError, not TypeError, for bad shapes: it is a bad option value, reported as such.
    if not isinstance(parsed, dict):
        raise ValueError("offsets JSON must be an object {topic: {partition: offset}}")  # noqa: TRY004
    spec: dict[TP, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise ValueError(  # noqa: TRY004
                f"offsets for topic {topic!r} must be an object {{partition: offset}}"
            )
        for part, offset in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise ValueError(f"partition {part!r} of topic {topic!r} is not an integer") from None
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(  # noqa: TRY004
                    f"offset of {topic}/{partition} must be an integer, got {offset!r}"
                )
            if offset < EARLIEST:
                raise ValueError(
                    f"offset of {topic}/{partition} is {offset}: use >= 0, -2 (earliest) "
                    "or -1 (latest)"
                )
            spec[(str(topic), partition)] = offset
    return spec


def _pick(spec: OffsetSpec, tp: TP, earliest: int, latest: int, missing: int) -> int:
    if spec == "earliest":
        return earliest
    if spec == "latest":
        return latest
    assert isinstance(spec, dict)
    offset = spec.get(tp, missing)
    if offset == EARLIEST:
        return earliest
    if offset == LATEST:
        return latest
    return offset


def resolve_ranges(
    earliest: Mapping[TP, int],
    latest: Mapping[TP, int],
    starting: OffsetSpec = "earliest",
    ending: OffsetSpec = "latest",
    *,
    fail_on_data_loss: bool = True,
) -> dict[TP, tuple[int, int]]:
    """Turn offset specs into concrete `[start, end)` per partition.

    `earliest` / `latest` are the log start and the *true* end (high watermark) of every
    partition to read. An end beyond the high watermark is clamped to it (those records do not
    exist yet); a start below the log start raises unless `fail_on_data_loss` is false, because
    the records were deleted and a job must not pretend it read them. A start past the end
    gives an empty range. JSON specs naming partitions that are not being read are an error:
    they are almost always a typo in a topic name.
    """
    for name, spec in (("starting_offsets", starting), ("ending_offsets", ending)):
        if isinstance(spec, dict):
            unknown = sorted(set(spec) - set(latest))
            if unknown:
                listed = ", ".join(f"{t}/{p}" for t, p in unknown)
                raise ValueError(f"{name} names partitions that are not being read: {listed}")
    ranges: dict[TP, tuple[int, int]] = {}
    for tp in sorted(latest):
        low, high = earliest.get(tp, 0), latest[tp]
        start = _pick(starting, tp, low, high, missing=EARLIEST)
        end = _pick(ending, tp, low, high, missing=LATEST)
        if start < low:
            if fail_on_data_loss:
                raise ValueError(
                    f"{tp[0]}/{tp[1]}: start offset {start} is below the log start {low} "
                    "(records deleted); set fail_on_data_loss=false to start at the log start"
                )
            start = low
        end = min(end, high)
        start = min(start, end)
        ranges[tp] = (start, end)
    return ranges


def plan_partitions(
    ranges: Mapping[TP, tuple[int, int]], max_records_per_partition: int
) -> list[OffsetRange]:
    """Split `{(topic, partition): (start, end)}` into input partitions of bounded size.

    A range of n offsets becomes ceil(n / max) chunks of near-equal size (they differ by at
    most one), so tasks are balanced instead of a full chunks plus a tiny tail. Empty ranges
    produce nothing. The order is deterministic (topic, partition, start), which keeps task
    numbering stable between runs.
    """
    if max_records_per_partition < 1:
        raise ValueError("max_records_per_partition must be >= 1")
    planned: list[OffsetRange] = []
    for (topic, partition), (start, end) in sorted(ranges.items()):
        if start < 0 or end < 0:
            raise ValueError(f"{topic}/{partition}: unresolved offsets ({start}, {end})")
        count = end - start
        if count <= 0:
            continue
        chunks = math.ceil(count / max_records_per_partition)
        base, extra = divmod(count, chunks)
        offset = start
        for index in range(chunks):
            size = base + (1 if index < extra else 0)
            planned.append(OffsetRange(topic, partition, offset, offset + size))
            offset += size
        assert offset == end
    return planned


def cap_offsets(
    start: Mapping[TP, int], latest: Mapping[TP, int], max_rows: int | None
) -> dict[TP, int]:
    """End offsets for one micro-batch: `latest`, or fewer so at most `max_rows` are read.

    Rows are shared fairly: every partition with backlog gets an equal share, and the share a
    partition cannot use goes to the others, so one hot partition cannot starve the rest.
    Partitions absent from `start` begin at 0 (callers put the log start there).
    """
    begin = {tp: min(start.get(tp, 0), high) for tp, high in latest.items()}
    if max_rows is None:
        return dict(latest)
    if max_rows < 0:
        raise ValueError("max_rows must be >= 0")
    end = dict(begin)
    backlog = {tp: latest[tp] - begin[tp] for tp in latest if latest[tp] > begin[tp]}
    budget = max_rows
    while budget > 0 and backlog:
        share = max(budget // len(backlog), 1)
        for tp in sorted(backlog):
            take = min(share, backlog[tp], budget)
            end[tp] += take
            backlog[tp] -= take
            budget -= take
            if budget == 0:
                break
        backlog = {tp: left for tp, left in backlog.items() if left > 0}
    return end


def offsets_to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """`{(topic, p): o}` -> `{"topic": {"p": o}}`: Spark checkpoints stream offsets as JSON."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> dict[TP, int]:
    """Inverse of `offsets_to_json`."""
    return {(topic, int(p)): int(o) for topic, parts in data.items() for p, o in parts.items()}


# -- options ---------------------------------------------------------------------------------

_ALIASES = {
    "startingoffsets": "starting_offsets",
    "endingoffsets": "ending_offsets",
    "kafka.bootstrap.servers": "bootstrap",
    "bootstrap_servers": "bootstrap",
    "subscribe": "topics",
    "maxrecordsperpartition": "max_records_per_partition",
    "failondataloss": "fail_on_data_loss",
    "maxoffsetspertrigger": "max_records_per_trigger",
}


def _flag(raw: str, name: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name}={raw!r}: must be true or false")


def _int_opt(opts: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = opts.get(name)
    if raw is None or not str(raw).strip():
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"option {name}={raw!r}: must be an integer") from None
    if value < minimum:
        raise ValueError(f"option {name}={raw!r}: must be >= {minimum}")
    return value


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Validated reader options; plain data so the reader pickles cheaply to executors."""

    bootstrap: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    start_ts_ms: int | None = None
    end_ts_ms: int | None = None
    max_records_per_partition: int = 500_000
    fail_on_data_loss: bool = True
    batch_rows: int = 20_000
    idle_timeout_s: float = 30.0
    request_timeout_ms: int = 30_000
    max_records_per_trigger: int | None = None
    consumer_config: Mapping[str, Any] = field(default_factory=dict)
    #: TLS/SASL, from the `security_*` options (`KafkaSecurity.options`): the executors build
    #: their connections from these, not from an environment they may not have
    security: KafkaSecurity = field(default_factory=KafkaSecurity)

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, streaming: bool = False) -> KafkaSourceOptions:
        """Parse Spark's string options; raise `ValueError` naming the bad option."""
        opts: dict[str, str] = {}
        for key, value in options.items():
            lowered = key.lower()
            opts[_ALIASES.get(lowered, lowered)] = value
        bootstrap = (opts.get("bootstrap") or "").strip()
        if not bootstrap:
            raise ValueError("option bootstrap is required (host:port of the Kafka cluster)")
        topics = tuple(t.strip() for t in (opts.get("topics") or "").split(",") if t.strip())
        if not topics:
            raise ValueError("option topics is required (comma-separated topic names)")
        try:
            starting = parse_offsets(
                opts.get("starting_offsets"), default="latest" if streaming else "earliest"
            )
        except ValueError as exc:
            raise ValueError(f"option starting_offsets: {exc}") from None
        try:
            ending = parse_offsets(opts.get("ending_offsets"), default="latest")
        except ValueError as exc:
            raise ValueError(f"option ending_offsets: {exc}") from None
        if streaming and "ending_offsets" in opts:
            raise ValueError("option ending_offsets is for batch reads only")
        if isinstance(starting, dict) or isinstance(ending, dict):
            named = {t for spec in (starting, ending) if isinstance(spec, dict) for t, _ in spec}
            stray = sorted(named - set(topics))
            if stray:
                raise ValueError(f"offsets name topics not in option topics: {', '.join(stray)}")
        start_ts = _int_opt(opts, "start_ts_ms", None, 0)
        end_ts = _int_opt(opts, "end_ts_ms", None, 0)
        if start_ts is not None and end_ts is not None and end_ts < start_ts:
            raise ValueError("option end_ts_ms must be >= start_ts_ms")
        consumer_config: dict[str, Any] = {}
        for key, value in opts.items():  # escape hatch: kafka.<aiokafka arg>=value
            if key.startswith("kafka.") and key != "kafka.bootstrap.servers":
                consumer_config[key[len("kafka."):].replace(".", "_")] = _coerce(value)
        idle = opts.get("idle_timeout_s")
        try:
            idle_timeout = float(idle) if idle else 30.0
        except ValueError:
            raise ValueError(f"option idle_timeout_s={idle!r}: must be a number") from None
        try:
            security = KafkaSecurity.from_options(opts)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"options security_*: {exc}") from None
        return cls(
            bootstrap=bootstrap,
            topics=topics,
            starting=starting,
            ending=ending,
            start_ts_ms=start_ts,
            end_ts_ms=end_ts,
            max_records_per_partition=_int_opt(opts, "max_records_per_partition", 500_000, 1)
            or 500_000,
            fail_on_data_loss=_flag(opts.get("fail_on_data_loss", "true"), "fail_on_data_loss"),
            batch_rows=_int_opt(opts, "batch_rows", 20_000, 1) or 20_000,
            idle_timeout_s=idle_timeout,
            request_timeout_ms=_int_opt(opts, "request_timeout_ms", 30_000, 1000) or 30_000,
            max_records_per_trigger=_int_opt(opts, "max_records_per_trigger", None, 1),
            consumer_config=consumer_config,
            security=security,
        )


def _coerce(raw: str) -> Any:
    """Option strings to the Python type aiokafka expects (ints, bools), else the string."""
    text = raw.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text


# -- talking to the broker -------------------------------------------------------------------


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


# -- the Spark data source -------------------------------------------------------------------


class KafkaDataSource(DataSource):  # type: ignore[misc,valid-type]
    """`spark.read.format("quota_kafka")` / `spark.readStream.format("quota_kafka")`."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> KafkaBatchReader:
        return KafkaBatchReader(KafkaSourceOptions.from_options(self.options))

    def streamReader(self, schema: Any) -> KafkaStreamReader:
        return KafkaStreamReader(KafkaSourceOptions.from_options(self.options, streaming=True))


class KafkaBatchReader(DataSourceReader):  # type: ignore[misc,valid-type]
    """Plans offset ranges once (driver side) and reads each in a task."""

    def __init__(self, opts: KafkaSourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[OffsetRange]:
        earliest, latest = probe_partitions(self.opts)
        ranges = resolve_ranges(
            earliest, latest, self.opts.starting, self.opts.ending,
            fail_on_data_loss=self.opts.fail_on_data_loss,
        )
        planned = plan_partitions(ranges, self.opts.max_records_per_partition)
        # Spark needs at least one partition; an empty range reads nothing.
        return planned or [OffsetRange(self.opts.topics[0], 0, 0, 0)]

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        return read_offset_range(self.opts, partition)


class KafkaStreamReader(DataSourceStreamReader):  # type: ignore[misc,valid-type]
    """Micro-batch reader: offsets are `{"topic": {"partition": next offset}}`.

    Also supports `Trigger.AvailableNow` ("catch up, then stop"): the target is the
    true end at the time the query starts. `commit` has nothing to do: Spark's checkpoint holds
    the offsets and no consumer group is used.
    """

    def __init__(self, opts: KafkaSourceOptions) -> None:
        self.opts = opts
        self._earliest: dict[TP, int] = {}
        self._target: dict[TP, int] | None = None

    def _probe(self) -> dict[TP, int]:
        earliest, latest = probe_partitions(self.opts)
        self._earliest = earliest
        return latest

    def initialOffset(self) -> dict:
        latest = self._probe()
        starting = self.opts.starting
        ranges = resolve_ranges(
            self._earliest, latest, starting, "latest",
            fail_on_data_loss=self.opts.fail_on_data_loss,
        )
        return offsets_to_json({tp: start for tp, (start, _end) in ranges.items()})

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._probe()

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        if self.opts.max_records_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_records_per_trigger)

    def latestOffset(self, start: dict, limit: Any) -> dict:
        latest = self._target if self._target is not None else self._probe()
        begin = offsets_from_json(start)
        for tp in latest:  # partitions added since the query started begin at the log start
            begin.setdefault(tp, self._earliest.get(tp, 0))
        max_rows = getattr(limit, "max_rows", None)
        end = cap_offsets(begin, latest, max_rows)
        for tp, offset in begin.items():  # never move backwards (e.g. a partition vanished)
            end[tp] = max(end.get(tp, offset), offset)
        return offsets_to_json(end)

    def partitions(self, start: dict, end: dict) -> Sequence[OffsetRange]:
        begin = offsets_from_json(start)
        stop = offsets_from_json(end)
        if any(tp not in begin and tp not in self._earliest for tp in stop):
            self._probe()  # restarted from a checkpoint: log starts of new partitions unknown
        ranges = {
            tp: (begin.get(tp, self._earliest.get(tp, 0)), high) for tp, high in stop.items()
        }
        return plan_partitions(ranges, self.opts.max_records_per_partition)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        return read_offset_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to commit: Spark's checkpoint is the source of truth for offsets."""
