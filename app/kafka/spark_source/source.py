"""The Spark data source: `spark.read.format("quota_kafka")` and `spark.readStream`, planned on the
driver and read by the executors (`app.kafka.spark_source` has the options and the contract)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from app.kafka.spark_source.offsets import (
    TP,
    OffsetRange,
    cap_offsets,
    offsets_from_json,
    offsets_to_json,
    plan_partitions,
    resolve_ranges,
)
from app.kafka.spark_source.options import KafkaSourceOptions
from app.kafka.spark_source.reader import SCHEMA_DDL, probe_partitions, read_offset_range

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

try:  # pyspark (the `audit` extra) is optional: importing this module must not need it
    from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
except ImportError:  # pragma: no cover - exercised only where pyspark is absent
    DataSource = DataSourceReader = DataSourceStreamReader = object  # type: ignore[misc,assignment]

__all__ = ["SOURCE_NAME", "KafkaBatchReader", "KafkaDataSource", "KafkaStreamReader"]

SOURCE_NAME = "quota_kafka"


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
