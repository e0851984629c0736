"""The live pipeline's per-record path without Kafka: ingest, internal codec, aggregate.

Imported by tests both as compiled and as interpreted source (test_engine_build).
"""

from __future__ import annotations

from typing import Any

import orjson

from app.engine.configs import ConfigUpdate
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import StreamClock, parse_record
from app.pipeline.aggregate import apply_rows
from app.pipeline.codec import decode_rows, encode_rows
from app.pipeline.ingest import Outbox, parse_source, route_events
from app.pipeline.routing import Router

PARTITIONS = 4


def run(lines: list[bytes], scope: str) -> list[Any]:
    """Per input record: its dead letters and sample counts, then each samples partition's
    (partition, rows, directives) as the aggregate computes them; configs apply directly."""
    engine = QuotaEngine(EngineSettings(scope=scope))
    router, clock = Router(engine, PARTITIONS), StreamClock()
    stores: dict[int, dict[str, Any]] = {}
    out: list[Any] = []
    for n, line in enumerate(lines):
        record = orjson.loads(line)
        if record.get("type") == "quota_config":
            for update in parse_record(record):
                assert isinstance(update, ConfigUpdate)
                engine.process(update)
            continue
        outbox = Outbox()
        events, dead = parse_source(line, clock)
        route_events(events, router, n, outbox)
        rows, _, counts = outbox.take()
        out.append([dead, sorted(counts.items())])
        for partition in sorted(rows):
            engine.store = stores.setdefault(partition, {})
            decoded = decode_rows(encode_rows(rows[partition]))
            out.append([partition, len(decoded), apply_rows(engine, decoded, {})])
    return out
