"""Read archived quota events into the shape the Kafka source produces, so the audit runs on both.

Why: Kafka retention is finite, so long-range audits run on archives: Parquet dumps or JSON-lines files. The audit job only knows one input shape, the
`quota_kafka` source's `topic, partition, offset, timestamp, key, value` with `value` = the
event's JSON bytes; this module turns archives into exactly that, and the audit code stays the
same whichever the input.

Accepted layouts (picked per call, from the columns or the file extension):

- **Kafka-shaped Parquet** (has a `value` column, e.g. written by `df.write.parquet` from the
  Kafka source): columns are cast to the schema; `value` may be bytes, a string or a nested
  struct (re-serialised); missing `partition/offset/key` are null, a missing `topic` or
  `timestamp` is derived as below; `timestamp` may be a timestamp or epoch ms.
- **Event-shaped Parquet** (one column per event field, `type`, `ts`, ...): each row is
  re-serialised with `to_json` as the value. Caveat: a wide Parquet table cannot tell a null
  field from a missing one, and nulls are dropped (a connection event would otherwise carry
  `"bytes": null`, which the validator rejects as a wrong type). An explicit `null` that means
  something, such as a QuotaConfig removing a quota, is lost this way: archive those as
  Kafka-shaped Parquet or JSON-lines.
- **JSON-lines** (`.jsonl`, `.ndjson`, `.json`, optionally compressed `.gz`/`.bz2`): one event
  per line; the line's bytes are the value, unchanged (blank lines are skipped).

Columns not in the archive are derived the same way for both event layouts:
`timestamp` from the event's `ts` (epoch ms; for a `batch` record the first inner event's `ts`),
`topic` from the `topic` argument or else from the event `type` using the contract's default
topic names (null for `batch` and unknown types), `partition` null, `offset` a unique id that
increases with the line/row order within a file (Spark's `monotonically_increasing_id`; not
contiguous), `key` null.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import TYPE_CHECKING, Literal

from app.kafka.spark_source.reader import SCHEMA_DDL

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["DEFAULT_TOPIC_FOR_TYPE", "KAFKA_COLUMNS", "ArchiveFormat", "infer_format", "read_archive"]

ArchiveFormat = Literal["parquet", "jsonl"]
KAFKA_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value")


def _default_topics() -> dict[str, str]:
    """Event type -> default topic name, taken from the settings so there is one list."""
    from app.settings import SETTINGS

    defaults = {s.env: s.default for s in SETTINGS}
    return {
        "request": defaults["QS_TOPIC_REQUEST"],
        "connection": defaults["QS_TOPIC_CONNECTION"],
        "mutation": defaults["QS_TOPIC_MUTATION"],
        "quota_config": defaults["QS_TOPIC_CONFIGS"],
    }


#: Contract default topic per event `type` (override with `read_archive(topic_for_type=...)`).
DEFAULT_TOPIC_FOR_TYPE: Mapping[str, str] = _default_topics()

_SUFFIXES: dict[str, ArchiveFormat] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
}
_COMPRESSION = {".gz", ".bz2", ".deflate", ".zst", ".lz4", ".snappy"}


def infer_format(paths: Iterable[str]) -> ArchiveFormat:
    """Archive format from file extensions (compression suffixes ignored).

    A directory (Spark output) has no extension: it is taken as Parquet, Spark's default.
    Mixed formats are an error, since one read cannot parse both.
    """
    found: set[ArchiveFormat] = set()
    for path in paths:
        suffixes = [s.lower() for s in PurePath(path.rstrip("/")).suffixes]
        while suffixes and suffixes[-1] in _COMPRESSION:
            suffixes.pop()
        if suffixes and suffixes[-1] in _SUFFIXES:
            found.add(_SUFFIXES[suffixes[-1]])
        elif not suffixes or path.endswith("/"):
            found.add("parquet")
        else:
            raise ValueError(f"cannot tell the archive format of {path!r}; pass format=")
    if len(found) != 1:
        raise ValueError(f"archive paths mix formats {sorted(found)}; read them separately")
    return found.pop()


def _topic_column(
    event_json: Column, topic: str | None, topic_for_type: Mapping[str, str]
) -> Column:
    from pyspark.sql import functions as F

    if topic is not None:
        return F.lit(topic).cast("string")
    event_type = F.get_json_object(event_json, "$.type")
    mapped = F.lit(None).cast("string")
    for name, mapped_topic in sorted(topic_for_type.items()):
        mapped = F.when(event_type == name, F.lit(mapped_topic)).otherwise(mapped)
    return mapped


def _timestamp_from_json(event_json: Column) -> Column:
    from pyspark.sql import functions as F

    ts = F.coalesce(
        F.get_json_object(event_json, "$.ts"), F.get_json_object(event_json, "$.events[0].ts")
    )
    # try_cast: a malformed ts must reach the validator as a bad event, not fail the read.
    return F.timestamp_millis(ts.try_cast("long"))


def _events_to_kafka_shape(
    df: DataFrame, value_json: Column, topic: str | None, topic_for_type: Mapping[str, str]
) -> DataFrame:
    from pyspark.sql import functions as F

    with_json = df.select(value_json.alias("_json"))
    return with_json.select(
        _topic_column(F.col("_json"), topic, topic_for_type).alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.monotonically_increasing_id().alias("offset"),
        _timestamp_from_json(F.col("_json")).alias("timestamp"),
        F.lit(None).cast("binary").alias("key"),
        F.col("_json").cast("binary").alias("value"),
    )


def _kafka_shaped(
    df: DataFrame, topic: str | None, topic_for_type: Mapping[str, str]
) -> DataFrame:
    """Cast a Parquet dump that already has a `value` column to the source's schema.

    `value` may be bytes, a string, or a nested struct/map (serialised with `to_json`); a
    missing `topic` column falls back to the event type like the other layouts.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, NumericType, StructType

    fields = {f.name: f.dataType for f in df.schema.fields}
    if isinstance(fields["value"], (StructType, MapType, ArrayType)):
        df = df.withColumn("value", F.to_json(F.col("value")))

    def column(name: str, spark_type: str) -> Column:
        if name == "topic" and (topic is not None or name not in fields):
            return _topic_column(F.col("value").cast("string"), topic, topic_for_type)
        if name == "timestamp" and name not in fields:
            return _timestamp_from_json(F.col("value").cast("string"))
        if name not in fields:
            return F.lit(None).cast(spark_type)
        if name == "timestamp" and isinstance(fields[name], NumericType):
            return F.timestamp_millis(F.col(name).cast("long"))  # epoch ms
        return F.col(name).cast(spark_type)

    types = dict(part.strip().split(" ", 1) for part in SCHEMA_DDL.split(","))
    return df.select(*(column(name, types[name]).alias(name) for name in KAFKA_COLUMNS))


def read_archive(
    spark: SparkSession,
    paths: str | Iterable[str],
    *,
    format: ArchiveFormat | None = None,
    topic: str | None = None,
    topic_for_type: Mapping[str, str] | None = None,
) -> DataFrame:
    """Archived events as a DataFrame with the Kafka source's schema (`value` = JSON bytes).

    `paths`: files, directories or globs, all of one format (inferred from the extensions
    unless `format` is given). `topic` forces the topic column for every row (useful when an
    archive holds one topic); otherwise an existing `topic` column or the event type decides.
    """
    from pyspark.sql import functions as F

    path_list = [paths] if isinstance(paths, str) else list(paths)
    if not path_list:
        raise ValueError("no archive paths given")
    fmt = format or infer_format(path_list)
    mapping = DEFAULT_TOPIC_FOR_TYPE if topic_for_type is None else topic_for_type
    if fmt == "jsonl":
        lines = spark.read.text(path_list)
        lines = lines.where(F.trim(F.col("value")) != "")
        return _events_to_kafka_shape(lines, F.col("value"), topic, mapping)
    if fmt != "parquet":
        raise ValueError(f"unknown archive format {fmt!r}: use 'parquet' or 'jsonl'")
    df = spark.read.parquet(*path_list)
    if "value" in df.columns:
        return _kafka_shaped(df, topic, mapping)
    value_json = F.to_json(F.struct(*(F.col(f"`{c}`") for c in df.columns)))
    return _events_to_kafka_shape(df, value_json, topic, mapping)
