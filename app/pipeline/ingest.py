"""The ingest's outbox: validated samples per samples partition, until they are sent.

Faust's cost is per record sent and per record consumed, not per sample, so the samples bound
for one partition share one internal record across as many source records as arrive together.
"""

from __future__ import annotations

from typing import Any

from app.engine.batch import RequestColumns
from app.intake.records import Decoded
from app.intake.routes import Router
from app.pipeline.codec import event_row

#: Samples after which the outbox is sent even if more records are waiting: bounds the extra
#: latency at saturation and keeps internal records under the producer's 1 MB request size
#: (~80 bytes a request row: 8,192 of them to one partition are ~650 kB with their names).
MAX_ROWS = 8192


class Outbox:
    """Request columns and event rows per samples partition, and the source records (Faust
    events) they came from.

    Held records are acked only once their samples were handed to the producer, which Faust
    flushes before every offset commit: no source offset is committed ahead of its samples.
    """

    def __init__(self) -> None:
        self.requests: dict[int, RequestColumns] = {}
        self.rows: dict[int, list[list[Any]]] = {}
        self.held: list[Any] = []
        self.size = 0
        #: samples per event type since the last take, for the metrics
        self.counts: dict[str, int] = {}

    def add(self, decoded: Decoded, router: Router) -> None:
        """A decoded record's good samples, each where its windows live."""
        requests = decoded.requests
        n = len(requests)
        if n:
            router.split(requests, self.requests)
            self.counts["request"] = self.counts.get("request", 0) + n
            self.size += n
        others = decoded.others
        if others:
            arrival = decoded.arrival
            for event in others:
                self.counts[event.type] = self.counts.get(event.type, 0) + 1
                for partition, _ in router.routes(event, arrival):
                    rows = self.rows.get(partition)
                    if rows is None:
                        rows = self.rows[partition] = []
                    rows.append(event_row(event, arrival))
            self.size += len(others)

    def take(self) -> tuple[dict[int, RequestColumns], dict[int, list[list[Any]]], list[Any],
                            dict[str, int]]:
        """Everything waiting (requests, rows, held records, counts); the outbox starts empty."""
        taken = self.requests, self.rows, self.held, self.counts
        self.requests, self.rows, self.held, self.counts, self.size = {}, {}, [], {}, 0
        return taken
