"""The aggregate's work on one internal record: its samples through the engine.

Kept apart from the Faust wiring so it is compiled with the engine (setup.py, listed in
`app/engine_build.py`): like the engine, this runs once per sample.
"""

from __future__ import annotations

from typing import Any

from app.engine.batch import RequestColumns
from app.engine.engine import QuotaEngine
from app.pipeline.codec import row_event


def apply_record(engine: QuotaEngine, batch: RequestColumns | None, rows: list[list[Any]],
                 latest: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """Run the engine over an internal record's samples, in order, each under the configs in
    force for it. Returns the directives to publish, each with its source record's append
    time (ms); `latest` gets each window's last check (the metrics' top entities)."""
    out: list[tuple[dict[str, Any], int]] = []
    if batch is not None:
        arrival = batch.arrival
        for directive, i in engine.process_requests(batch):
            out.append((directive, arrival[i]))
        latest.update(engine.drain_windows())
        return out
    for row in rows:
        item, appended_ms = row_event(row)
        decisions, directives = engine.process(item, appended_ms)
        for d in decisions:
            latest[d.key] = d
        for directive in directives:
            out.append((directive, appended_ms))
    return out
