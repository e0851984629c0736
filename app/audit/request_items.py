"""Request rows as step-1 items and back: the audit's per-row work, typed and compiled.

A request crosses from step 1 to step 2 as an item `(t, s, pos, i, ROW_REQUEST, payload,
arrival)` whose payload is its row of the intake's columns (`RequestColumns`: names inline,
times in whole nanoseconds), inside a `marshal`led chunk (`app.audit.recompute`). These loops
run once per request, so they are compiled with the engine (`app.engine_build`): interpreted,
step 1's placement and step 2's rebuilding of the rows cost more than the engine.
"""

from __future__ import annotations

from typing import Any, Final

from app.engine.batch import RequestColumns
from app.engine.timeline import ConfigTimeline
from app.intake.routes import ConfigScoped, principal_values

#: The item kind of a request row (`app.audit.event_codec` has the others).
ROW_REQUEST: Final = 0


def request_payload(batch: RequestColumns, i: int) -> tuple[Any, ...]:
    """Row `i` of validated request columns as an item's payload."""
    names = batch.names
    return (batch.ts[i], batch.broker[i], batch.gateway[i], names[batch.listener[i]],
            names[batch.user[i]], names[batch.client_id[i]], names[batch.ip[i]],
            names[batch.api[i]], batch.bytes[i], batch.thread_ns[i], batch.network_ns[i],
            batch.exempt[i], batch.count[i], batch.throttle_ms[i])


def append_request(batch: RequestColumns, payload: tuple[Any, ...], arrival: int) -> None:
    """A request item's payload back as a row of `batch`."""
    batch.append(payload[0], payload[1], payload[2], payload[3], payload[4], payload[5],
                 payload[6], payload[7], payload[8], payload[9], payload[10], payload[11] != 0,
                 payload[12], arrival, 0, payload[13])


Key = tuple[int, int, int, int]


def gather_requests(ready: list[tuple[Any, ...]], limit: int
                    ) -> tuple[list[tuple[list[Key], RequestColumns]], list[tuple[Any, ...]]]:
    """Step 2: the request items of `ready` as batches of rows (at most `limit` each) with
    their sort keys, in order; and the other items, in order."""
    batches: list[tuple[list[Key], RequestColumns]] = []
    others: list[tuple[Any, ...]] = []
    keys: list[Key] = []
    batch = RequestColumns()
    for item in ready:
        if item[4] == ROW_REQUEST:
            if len(keys) == limit:
                batches.append((keys, batch))
                keys, batch = [], RequestColumns()
            keys.append((item[0], item[1], item[2], item[3]))
            append_request(batch, item[5], item[6])
        else:
            others.append(item)
    if keys:
        batches.append((keys, batch))
    return batches, others


class RequestPlacer:
    """Step 1: a record's request rows as items in their step-2 partition's chunk, each
    row's partition resolved once per principal (`principal_values`, as the worker's router
    does)."""

    def __init__(self, timeline: ConfigTimeline) -> None:
        self.cache = ConfigScoped(timeline)

    def place(self, batch: RequestColumns, at: list[int], time: int, kafka: bool, s: int,
              pos: int, chunks: list[list[Any]], resolve: Any) -> int:
        """Append rows `0..n` of `batch` (at indexes `at` in their record, at position
        (`s`, `pos`)) to `chunks`; return the stream time after them (`time` before).

        `resolve(batch, row)` -> the partition of a row whose principal is not cached.
        Kafka input keys items by stream time, an archive by 0 (`app.audit.recompute`).
        """
        partitions = principal_values(self.cache, batch, resolve)
        ts_col, arrival = batch.ts, batch.arrival
        for j in range(len(ts_col)):
            ts = ts_col[j]
            if ts > time:
                time = ts
            chunks[int(partitions[j])].append((time if kafka else 0, s, pos, at[j],
                                               ROW_REQUEST, request_payload(batch, j),
                                               arrival[j]))
        return time
