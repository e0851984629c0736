"""The live pipeline's per-record path without Kafka: intake, outbox, internal codec, aggregate.

Imported by tests both as compiled and as interpreted source (test_engine_build).
"""

from __future__ import annotations

from typing import Any

import orjson

from app.engine.engine import EngineSettings, QuotaEngine
from app.intake.clock import StreamClock
from app.intake.records import Decoded, decode_source
from app.intake.routes import Router
from app.intake.stream import StreamIntake
from app.pipeline import codec
from app.pipeline.aggregate import apply_record
from app.kafka.config_follower import ConfigFollower
from app.pipeline.ingest import Outbox
from app.signing import Signing

PARTITIONS = 4


def settings(scope: str) -> EngineSettings:
    """The workers' engine settings for a scope name: `broker`, `cluster`, or `allocations`
    (cluster scope with allocations, as the broker plugin's and the gateways' workers run)."""
    if scope == "allocations":
        return EngineSettings(scope="cluster", accounting="served", allocations=True)
    return EngineSettings(scope=scope)


def run(lines: list[bytes], scope: str) -> list[Any]:
    """Per input record, once its stream clock judged it: its dead letters and sample counts,
    then each samples partition's (partition, samples, directives) as the aggregate computes
    them; per config record, `{"config": "applied" or "refused"}` by the workers' config
    follower. Records the clock still holds at the end are judged then (a worker would wait
    for more)."""
    engine = QuotaEngine(settings(scope))
    follower = ConfigFollower("", "configs", engine.timeline, signing=Signing())
    router = Router(engine, PARTITIONS)
    intake: StreamIntake[None] = StreamIntake(StreamClock())
    stores: dict[int, dict[str, Any]] = {}
    out: list[Any] = []

    def emit(decoded: Decoded) -> None:
        outbox = Outbox()
        outbox.add(decoded, router)
        requests, rows, _, counts = outbox.take()
        out.append([[(i, reason) for i, reason, _ in decoded.dead], sorted(counts.items())])
        records = [(p, codec.encode_requests(b)) for p, b in requests.items()]
        records += [(p, codec.encode_rows(r)) for p, r in rows.items()]
        for partition, record in sorted(records):
            engine.store = stores.setdefault(partition, {})
            batch, event_rows = codec.decode(record)
            size = len(batch) if batch is not None else len(event_rows)
            out.append([partition, size, apply_record(engine, batch, event_rows, {})])

    for n, line in enumerate(lines):
        if line.startswith(b"{") and orjson.loads(line).get("type") == "quota_config":
            refused = follower.bad
            follower.apply(line)
            out.append({"config": "refused" if follower.bad > refused else "applied"})
            continue
        for decoded, _ in intake.offer(decode_source(line, n), None):
            emit(decoded)
    for decoded, _ in intake.finish():
        emit(decoded)
    return out
