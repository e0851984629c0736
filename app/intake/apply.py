"""Samples through the engine, as every driver applies them.

`apply_samples` is the one order: request rows through `QuotaEngine.process_requests` as one
batch, then connections and mutations one by one. They touch disjoint windows (request windows,
connection rates, mutation buckets), so this order decides exactly what the samples' own order
would. The worker's aggregate runs an internal record through it, the audit's step 2 its
request batches, and `apply` a decoded record (`replay`, the simulator).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.engine.batch import RequestColumns
from app.engine.engine import Decision, QuotaEngine
from app.engine.events import Event
from app.intake.records import Decoded


def apply_samples(engine: QuotaEngine, requests: RequestColumns | None, others: Sequence[Event],
                  arrivals: Sequence[int], decisions: list[list[Decision]] | None = None
                  ) -> list[tuple[dict[str, Any], int]]:
    """Request rows, then `others` (each with its source record's Kafka timestamp in
    `arrivals`), through the engine. Returns the directives to publish, each with the index of
    the sample that published it: a request row's, or `len(requests)` plus the other's.
    `decisions` receives each sample's decisions in that order."""
    n = 0
    out: list[tuple[dict[str, Any], int]] = []
    if requests is not None and len(requests):
        n = len(requests)
        out = engine.process_requests(requests, decisions)
    for j in range(len(others)):
        row, published = engine.process(others[j], arrivals[j])
        if decisions is not None:
            decisions.append(row)
        for directive in published:
            out.append((directive, n + j))
    return out


def apply(engine: QuotaEngine, decoded: Decoded, decisions: bool = False
          ) -> tuple[list[dict[str, Any]], list[list[Decision]]]:
    """A decoded record's directives, and (with `decisions`) each item's decisions by its
    index in the record (none for a dead letter); idle windows are dropped when a sweep is
    due."""
    rows: list[list[Decision]] | None = [] if decisions else None
    requests, others = decoded.requests, decoded.others
    published = apply_samples(engine, requests, others, [decoded.arrival] * len(others), rows)
    per_item: list[list[Decision]] = [[] for _ in range(decoded.size)] if decisions else []
    if rows is not None:
        for i, row in zip(decoded.request_at + decoded.other_at, rows):
            per_item[i] = row
    latest = max(requests.ts) if len(requests) else -1
    for event in others:
        latest = max(latest, event.ts)
    if latest >= 0:
        engine.expire_due(latest)
    return [d for d, _ in published], per_item
