"""The internal samples topic's record formats: many validated samples per Kafka record.

Faust's per-message cost caps a worker near 10k records/s, so throughput comes from packing
thousands of samples into one record. Request samples travel as an internal columnar record
(`app.intake.columnar`, with each row's arrival and quota types to process); the few
connection and mutation events as compact JSON arrays, one per event. Both were validated at
ingest, so these formats are trusted.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.engine.events import ConnectionEvent, Event, MutationEvent
from app.engine.batch import RequestColumns
from app.intake import columnar

FORMAT = 2


def event_row(event: Event, appended_ms: int) -> list[Any]:
    """A connection or mutation event as a positional row; `appended_ms`: its arrival."""
    if isinstance(event, ConnectionEvent):
        return ["c", event.ts, event.broker, event.listener, event.ip, event.inter_broker,
                appended_ms]
    if isinstance(event, MutationEvent):
        return ["m", event.ts, event.broker, event.user, event.client_id, event.api,
                event.api_version, event.partitions, event.validate_only, appended_ms]
    raise TypeError("request samples travel as columns")


def row_event(row: list[Any]) -> tuple[Event, int]:
    """Back to (event, source append time in ms)."""
    if row[0] == "c":
        return ConnectionEvent(row[1], row[2], row[3], row[4], row[5]), row[6]
    return MutationEvent(row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8]), row[9]


def encode_rows(rows: list[list[Any]]) -> bytes:
    return orjson.dumps({"f": FORMAT, "rows": rows})


def encode_requests(batch: RequestColumns) -> bytes:
    return columnar.encode(batch, internal=True)


def decode(data: bytes) -> tuple[RequestColumns | None, list[list[Any]]]:
    """An internal record: its request columns, or its event rows."""
    if columnar.is_columnar(data):
        batch, internal = columnar.decode(data)
        if not internal:
            raise ValueError("a source batch on the internal topic")
        return batch, []
    body = orjson.loads(data)
    if body.get("f") != FORMAT:
        raise ValueError(f"unknown internal record format {body.get('f')!r}")
    return None, body["rows"]


def latest(batch: RequestColumns | None, rows: list[list[Any]]) -> tuple[int, int]:
    """The latest event time and the latest arrival (ms; -1 for none) of an internal record."""
    if batch is not None:
        if not len(batch):
            return -1, -1
        return max(batch.ts), max(batch.arrival)
    return max((r[1] for r in rows), default=-1), max((r[-1] for r in rows), default=-1)
