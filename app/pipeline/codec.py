"""The internal re-key topic's record format: many validated events per Kafka record.

Faust's per-message cost caps a worker near 10k records/s, so throughput comes from packing
hundreds of samples into one record. Events here were validated at ingest, so this format is
trusted: compact JSON arrays, one per event, with the quota types to process when the live
pipeline had to split one request across partitions (see `QuotaEngine.route_keys`).
"""

from __future__ import annotations

from typing import Any

import orjson

from app.engine.events import ConnectionEvent, Event, MutationEvent, RequestEvent

FORMAT = 1


def event_row(event: Event, only: tuple[str, ...] | None, appended_ms: int) -> list[Any]:
    """One event as a positional row; `appended_ms` is its source record's append time."""
    if isinstance(event, RequestEvent):
        return ["r", event.ts, event.broker, event.listener, event.user, event.client_id, event.ip,
                event.api, event.bytes, event.thread_ms, event.network_ms, event.exempt,
                event.count, only, event.gateway, appended_ms]
    if isinstance(event, ConnectionEvent):
        return ["c", event.ts, event.broker, event.listener, event.ip, event.inter_broker,
                None, appended_ms]
    return ["m", event.ts, event.broker, event.user, event.client_id, event.api,
            event.api_version, event.partitions, event.validate_only, None, appended_ms]


def row_event(row: list[Any]) -> tuple[Event, tuple[str, ...] | None, int]:
    """Back to (event, quotas to process or None for all, source append time in ms)."""
    kind = row[0]
    if kind == "r":
        only = row[13]
        gateway = row[14] if len(row) > 15 else -1  # rows written before gateways had none
        return (RequestEvent(row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8],
                             row[9], row[10], row[11], row[12], gateway),
                tuple(only) if only is not None else None, row[-1])
    if kind == "c":
        return ConnectionEvent(row[1], row[2], row[3], row[4], row[5]), None, row[7]
    return (MutationEvent(row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8]),
            None, row[10])


def latest_ts(rows: list[list[Any]]) -> int:
    """The latest event time (ms) among rows (-1 for none): every row starts with it."""
    latest = -1
    for row in rows:
        if row[1] > latest:
            latest = row[1]
    return latest


def latest_arrival(rows: list[list[Any]]) -> int:
    """The latest source append time (ms) among rows (-1 for none): every row ends with it."""
    latest = -1
    for row in rows:
        if row[-1] > latest:
            latest = row[-1]
    return latest


def encode_rows(rows: list[list[Any]]) -> bytes:
    return orjson.dumps({"f": FORMAT, "rows": rows})


def decode_rows(data: bytes) -> list[list[Any]]:
    body = orjson.loads(data)
    if body.get("f") != FORMAT:
        raise ValueError(f"unknown internal record format {body.get('f')!r}")
    return body["rows"]
