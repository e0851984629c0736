"""The aggregate's work on one internal record: its rows through the engine.

Kept apart from the Faust wiring so it is compiled with the engine (setup.py, listed in
`app/engine_build.py`): like the engine, this loop runs once per sample.
"""

from __future__ import annotations

from typing import Any

from app.engine.engine import Decision, QuotaEngine
from app.pipeline.codec import row_event


def apply_rows(engine: QuotaEngine, rows: list[list[Any]], latest: dict[str, Decision]
               ) -> list[tuple[dict[str, Any], int]]:
    """Run the engine over an internal record's rows, in order, each under the configs in force
    for it.

    Returns the directives to publish, each with its source record's append time (ms).
    `latest` keeps each window's last decision (the metrics' top entities).
    """
    out: list[tuple[dict[str, Any], int]] = []
    for row in rows:
        item, only, appended_ms = row_event(row)
        if only is None:
            decisions, directives = engine.process(item, appended_ms)
        else:
            decisions, directives = engine.process_only(item, only, appended_ms)  # type: ignore[arg-type]
        for d in decisions:
            latest[d.key] = d
        for directive in directives:
            out.append((directive, appended_ms))
    return out
