"""The intake of contract records (source events, config values), and the outbox rows wait in.

Faust's cost is per record sent and per record consumed, not per row, so rows bound for the
same samples partition share one internal record across as many source records as arrive
together (see `Outbox`).
"""

from __future__ import annotations

from typing import Any

import orjson

from app.engine.configs import ConfigUpdate
from app.engine.events import BadEvent, Event, StreamClock, parse_event, parse_record
from app.pipeline.codec import event_row
from app.pipeline.routing import Router

#: Rows after which the outbox is sent even if more records are waiting: bounds the extra
#: latency at saturation and keeps internal records well under the producer's request size.
MAX_ROWS = 4096


class Outbox:
    """Rows per samples partition, and the source records (Faust events) they came from.

    Held records are acked only once their rows were handed to the producer, which Faust
    flushes before every offset commit: no source offset is committed ahead of its rows.
    """

    def __init__(self) -> None:
        self.rows: dict[int, list[list[Any]]] = {}
        self.held: list[Any] = []
        self.size = 0
        #: samples per event type since the last take, for the metrics
        self.counts: dict[str, int] = {}

    def add(self, partition: int, row: list[Any]) -> None:
        rows = self.rows.get(partition)
        if rows is None:
            rows = self.rows[partition] = []
        rows.append(row)
        self.size += 1

    def take(self) -> tuple[dict[int, list[list[Any]]], list[Any], dict[str, int]]:
        """Everything waiting (rows, held records, counts); the outbox starts empty again."""
        taken = self.rows, self.held, self.counts
        self.rows, self.held, self.counts, self.size = {}, [], {}, 0
        return taken


def parse_config_value(value: bytes | None) -> tuple[ConfigUpdate | None, str | None]:
    """A config-topic record value: its update, or None and the reason it is bad."""
    try:
        item = parse_event(orjson.loads(value or b""))
    except orjson.JSONDecodeError as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(item, ConfigUpdate):
        return None, getattr(item, "reason", "not a quota_config record")
    return item, None


def parse_source(value: bytes | None, clock: StreamClock) -> tuple[list[Event], list[tuple[str, Any]]]:
    """Validate a contract record: its good events and its dead letters as (reason, raw
    input). The good events of a batch stand."""
    try:
        record = orjson.loads(value or b"")
    except orjson.JSONDecodeError as exc:
        return [], [(f"not JSON: {exc}", value)]
    items = parse_record(record)
    inner = record.get("events") if isinstance(record, dict) and record.get("type") == "batch" else None
    raws = inner if isinstance(inner, list) and len(inner) == len(items) else [record] * len(items)
    events: list[Event] = []
    dead: list[tuple[str, Any]] = []
    for i in range(len(items)):
        item = items[i]
        if isinstance(item, BadEvent):
            dead.append((item.reason, raws[i]))
            continue
        if isinstance(item, ConfigUpdate):
            dead.append(("quota_config records belong on the config topic", raws[i]))
            continue
        reason = clock.check(item.ts)
        if reason is not None:
            dead.append((reason, raws[i]))
            continue
        events.append(item)
    return events, dead


def event_timestamps(value: bytes | None) -> list[int]:
    """The `ts` of every event of a source record that a `StreamClock` would judge (what
    `parse_source` checks), in order: what rebuilds a partition's clock (`StreamClock.seed`)."""
    try:
        record = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return []
    return [item.ts for item in parse_record(record)
            if not isinstance(item, (BadEvent, ConfigUpdate))]


def route_events(events: list[Event], router: Router, appended_ms: int, outbox: Outbox) -> None:
    """Put validated events' rows in the outbox, each where its windows live under the configs
    in force for it (`appended_ms`: its source record's Kafka timestamp, its arrival)."""
    counts = outbox.counts
    # direct calls, no bound-method locals: compiled, those would be generic Python calls
    for i in range(len(events)):
        item = events[i]
        counts[item.type] = counts.get(item.type, 0) + 1
        for partition, only in router.routes(item, appended_ms):
            outbox.add(partition, event_row(item, only, appended_ms))
