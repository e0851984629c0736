"""Archives (JSON-lines, Parquet) read into the Kafka source's shape, so the audit runs on both.

Needs Spark but no broker. The important property: `value` is the event's JSON, byte for byte
for JSON-lines, so the audit parses archived and live events with the same code.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.spark_fixtures import spark
except ImportError:  # pragma: no cover
    from spark_fixtures import spark  # type: ignore[no-redef]  # noqa: F401

from app.audit.archive import DEFAULT_TOPIC_FOR_TYPE, KAFKA_COLUMNS, infer_format, read_archive
from app.kafka.spark_source.reader import SCHEMA_DDL

REQUEST = {"type": "request", "v": 1, "ts": 1763800000123, "broker": 1, "user": "alice",
           "client_id": "billing", "api": "Produce", "bytes": 1048576, "thread_time_ms": 1.25}
CONNECTION = {"type": "connection", "v": 1, "ts": 1763800000456, "broker": 1, "ip": "10.0.0.1",
              "inter_broker": False}
BATCH = {"type": "batch", "v": 1, "broker": 2, "events": [dict(REQUEST, ts=1763800000999)]}


def ms(ts: datetime) -> int:
    return int(ts.replace(tzinfo=UTC).timestamp() * 1000) if ts.tzinfo is None else int(
        ts.timestamp() * 1000
    )


def kafka_types(spark) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(f.name, f.dataType.simpleString()) for f in spark.createDataFrame([], SCHEMA_DDL).schema]


# -- pure ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "paths, fmt",
    [
        (["a.jsonl", "b.ndjson.gz"], "jsonl"),
        (["x/part-0.parquet"], "parquet"),
        (["/archive/2025-11-22/"], "parquet"),
        (["events.json.bz2"], "jsonl"),
    ],
)
def test_infer_format(paths: list[str], fmt: str) -> None:
    assert infer_format(paths) == fmt


@pytest.mark.parametrize("paths", [["a.jsonl", "b.parquet"], ["notes.txt"]])
def test_infer_format_rejects_mixed_or_unknown(paths: list[str]) -> None:
    with pytest.raises(ValueError):
        infer_format(paths)


# -- with Spark ------------------------------------------------------------------------------


@pytest.mark.spark
def test_jsonl_values_are_the_lines_byte_for_byte(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lines = [json.dumps(REQUEST), json.dumps(CONNECTION, indent=None), "", json.dumps(BATCH)]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    df = read_archive(spark, str(path))
    assert [(n, t) for n, t in ((f.name, f.dataType.simpleString()) for f in df.schema)] == kafka_types(spark)
    rows = df.orderBy("offset").collect()
    assert [bytes(r.value).decode() for r in rows] == [lines[0], lines[1], lines[3]]
    assert [r.topic for r in rows] == [
        DEFAULT_TOPIC_FOR_TYPE["request"], DEFAULT_TOPIC_FOR_TYPE["connection"], None
    ]
    assert [ms(r.timestamp) for r in rows] == [REQUEST["ts"], CONNECTION["ts"], 1763800000999]
    assert len({r.offset for r in rows}) == 3
    assert all(r.partition is None and r.key is None for r in rows)
    forced = read_archive(spark, [str(path)], topic="replay")
    assert {r.topic for r in forced.collect()} == {"replay"}


@pytest.mark.spark
def test_event_shaped_parquet_is_reserialised(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    events = [REQUEST, CONNECTION]
    names = list(dict.fromkeys(k for event in events for k in event))
    table = pa.table({n: [e.get(n) for e in events] for n in names})  # nulls where absent
    pq.write_table(table, tmp_path / "events.parquet")
    rows = read_archive(spark, str(tmp_path / "events.parquet")).collect()
    assert sorted((json.loads(r.value) for r in rows), key=lambda d: d["ts"]) == [REQUEST, CONNECTION]
    assert {r.topic for r in rows} == {DEFAULT_TOPIC_FOR_TYPE["request"], DEFAULT_TOPIC_FOR_TYPE["connection"]}


@pytest.mark.spark
def test_kafka_shaped_parquet_keeps_its_columns(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    value = json.dumps(REQUEST).encode()
    table = pa.table(
        {
            "topic": ["quota.events.request"],
            "partition": pa.array([3], pa.int64()),
            "offset": [41],
            "timestamp": [REQUEST["ts"]],  # epoch ms, as some dumps store it
            "key": [b"alice"],
            "value": [value],
            "extra": ["dropped"],
        }
    )
    pq.write_table(table, tmp_path / "dump.parquet")
    df = read_archive(spark, str(tmp_path / "dump.parquet"))
    assert df.columns == list(KAFKA_COLUMNS)
    row = df.collect()[0]
    assert (row.topic, row.partition, row.offset, bytes(row.key), bytes(row.value)) == (
        "quota.events.request", 3, 41, b"alice", value
    )
    assert ms(row.timestamp) == REQUEST["ts"]
