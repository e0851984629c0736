"""A decoded record through the engine: what `replay` and the simulator do with each record.

Request rows go through `QuotaEngine.process_requests` as one batch, then connections and
mutations one by one: they touch disjoint windows (request windows, connection rates,
mutation buckets), so this order decides exactly what the record's order would.
"""

from __future__ import annotations

from typing import Any

from app.engine.engine import Decision, QuotaEngine
from app.intake.records import Decoded


def apply(engine: QuotaEngine, decoded: Decoded, decisions: bool = False
          ) -> tuple[list[dict[str, Any]], list[list[Decision]]]:
    """The record's directives, and (with `decisions`) each item's decisions by its index in
    the record (none for a dead letter); idle windows are dropped when a sweep is due."""
    per_item: list[list[Decision]] = [[] for _ in range(decoded.size)] if decisions else []
    directives: list[dict[str, Any]] = []
    latest = -1
    requests = decoded.requests
    if len(requests):
        rows: list[list[Decision]] | None = [] if decisions else None
        for directive, _ in engine.process_requests(requests, rows):
            directives.append(directive)
        if rows is not None:
            for i, row in zip(decoded.request_at, rows):
                per_item[i] = row
        latest = max(requests.ts)
    for i, event in zip(decoded.other_at, decoded.others):
        row, published = engine.process(event, decoded.arrival)
        if decisions:
            per_item[i] = row
        directives.extend(published)
        latest = max(latest, event.ts)
    if latest >= 0:
        engine.expire_due(latest)
    return directives, per_item
