"""The aggregate's work on one internal record: its samples through the engine
(`app.intake.apply.apply_samples`, as every driver applies them).

Kept apart from the Faust wiring so it is compiled with the engine (setup.py, listed in
`app/engine_build.py`): like the engine, this runs once per sample.
"""

from __future__ import annotations

from typing import Any

from app.engine.batch import RequestColumns
from app.engine.engine import Decision, QuotaEngine
from app.engine.events import Event
from app.intake.apply import apply_samples
from app.pipeline.codec import row_event


def apply_record(engine: QuotaEngine, batch: RequestColumns | None, rows: list[list[Any]],
                 latest: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """Run the engine over an internal record's samples, in order, each under the configs in
    force for it. Returns the directives to publish, each with its source record's append
    time (ms); `latest` gets each window's last check (the metrics' top entities)."""
    if batch is not None:
        arrival = batch.arrival
        out = [(directive, arrival[i]) for directive, i in apply_samples(engine, batch, (), ())]
        latest.update(engine.drain_windows())
        return out
    events: list[Event] = []
    arrivals: list[int] = []
    for row in rows:
        event, appended_ms = row_event(row)
        events.append(event)
        arrivals.append(appended_ms)
    decisions: list[list[Decision]] = []
    published = apply_samples(engine, None, events, arrivals, decisions)
    for checks in decisions:
        for d in checks:
            latest[d.key] = d
    return [(directive, arrivals[j]) for directive, j in published]
