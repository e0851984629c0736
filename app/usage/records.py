"""`RecordEncoder`: a flush's spans as event-topic record values, each within a size bound.

Pure (no I/O). Every span becomes one record per event kind, carrying every principal's and
every broker's events of that span (the workers re-key each sample by its resolved quota entity,
so nothing is gained by splitting a flush per principal, and each record costs them far more
than each event). A record is split only to stay within `max_bytes` of encoded value (the
topics' `max.message.bytes` is 1 MB by default; the default bound leaves half of it) and
`MAX_BATCH` events. Splitting follows recording order, so the records of a span, sent in order
to one partition, keep it.

Shapes (docs/contract.md): requests are columnar batches with `columnar` (what a worker decodes
fastest), else JSON batches; connections and mutations are JSON batches. A JSON batch has no
`broker` of its own: every event names its broker, so one record carries them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import orjson

from app.engine.batch import RequestColumns
from app.engine.events import MAX_BATCH
from app.intake import columnar
from app.usage.drops import TOO_LARGE, Drops
from app.usage.recorder import CONNECTION, MUTATION, REQUEST, Connection, Mutation, Span

#: default bound on a record's value (QS_EVENT_RECORD_BYTES)
DEFAULT_RECORD_BYTES = 512 * 1024
_JSON_HEAD = b'{"type":"batch","v":1,"events":['
_JSON_TAIL = b"]}"


class Record(NamedTuple):
    """One record value, the kind of its events and how many it carries."""

    kind: str
    value: bytes
    events: int


class RecordEncoder:
    """Spans into records of at most `max_bytes`; an event that alone would exceed it is
    dropped and counted (`too_large`) rather than sent to be refused with its neighbours."""

    def __init__(self, columnar: bool = False, max_bytes: int = DEFAULT_RECORD_BYTES,
                 drops: Drops | None = None) -> None:
        self.columnar = columnar
        self.max_bytes = max_bytes
        self.drops = Drops() if drops is None else drops

    def records(self, spans: Iterable[Span]) -> list[Record]:
        out: list[Record] = []
        for span in spans:
            if len(span.requests):
                if self.columnar:
                    out += self._columnar(span.requests)
                else:
                    out += self._json(REQUEST, [_request(span.requests, i)
                                                for i in range(len(span.requests))])
            if span.connections:
                out += self._json(CONNECTION, [_connection(c) for c in span.connections])
            if span.mutations:
                out += self._json(MUTATION, [_mutation(m) for m in span.mutations])
        return out

    def _columnar(self, batch: RequestColumns) -> list[Record]:
        n = len(batch)
        if n <= MAX_BATCH:
            value = columnar.encode(batch)
            if len(value) <= self.max_bytes:
                return [Record(REQUEST, value, n)]
        return [Record(REQUEST, columnar.encode(columnar.take(batch, rows)), len(rows))
                for rows in self._columnar_chunks(batch)]

    def _columnar_chunks(self, batch: RequestColumns) -> list[list[int]]:
        """Consecutive rows per record, each record's exact encoded size within the bound:
        the header, 4 bytes and the UTF-8 of each name the record uses, the row columns."""
        name_bytes = [4 + len(name.encode()) for name in batch.names]
        columns = (batch.listener, batch.user, batch.client_id, batch.ip, batch.api)
        chunks: list[list[int]] = []
        rows: list[int] = []
        seen: set[int] = set()
        size = columnar.HEADER_BYTES
        for i in range(len(batch)):
            names = {column[i] for column in columns}
            alone = columnar.HEADER_BYTES + columnar.SOURCE_ROW_BYTES + sum(
                name_bytes[k] for k in names)
            if alone > self.max_bytes:
                self.drops.add(TOO_LARGE, 1)
                continue
            grow = columnar.SOURCE_ROW_BYTES + sum(name_bytes[k] for k in names - seen)
            if rows and (size + grow > self.max_bytes or len(rows) >= MAX_BATCH):
                chunks.append(rows)
                rows, seen, size = [], set(), columnar.HEADER_BYTES
                grow = alone - columnar.HEADER_BYTES
            rows.append(i)
            seen |= names
            size += grow
        if rows:
            chunks.append(rows)
        return chunks

    def _json(self, kind: str, events: list[dict[str, Any]]) -> list[Record]:
        """JSON batches: each event encoded once, the batches joined from those bytes."""
        parts = [orjson.dumps(e) for e in events]
        frame = len(_JSON_HEAD) + len(_JSON_TAIL)
        out: list[Record] = []
        chunk: list[bytes] = []
        size = frame
        for part in parts:
            if frame + len(part) > self.max_bytes:
                self.drops.add(TOO_LARGE, 1)
                continue
            grow = len(part) + (1 if chunk else 0)
            if chunk and (size + grow > self.max_bytes or len(chunk) >= MAX_BATCH):
                out.append(_json_record(kind, chunk))
                chunk, size, grow = [], frame, len(part)
            chunk.append(part)
            size += grow
        if chunk:
            out.append(_json_record(kind, chunk))
        return out


def _json_record(kind: str, parts: list[bytes]) -> Record:
    return Record(kind, _JSON_HEAD + b",".join(parts) + _JSON_TAIL, len(parts))


def _request(batch: RequestColumns, i: int) -> dict[str, Any]:
    """Row `i` as a contract `RequestEvent` (times back in ms: the workers convert them to the
    same whole nanoseconds)."""
    names = batch.names
    event: dict[str, Any] = {
        "type": REQUEST, "v": 1, "ts": batch.ts[i], "broker": batch.broker[i],
        "listener": names[batch.listener[i]], "user": names[batch.user[i]],
        "client_id": names[batch.client_id[i]], "ip": names[batch.ip[i]],
        "api": names[batch.api[i]], "bytes": batch.bytes[i],
        "thread_time_ms": batch.thread_ns[i] / 1e6, "network_time_ms": batch.network_ns[i] / 1e6,
        "exempt": batch.exempt[i] == 1, "count": batch.count[i]}
    if batch.gateway[i] >= 0:
        event["gateway"] = batch.gateway[i]
    if batch.throttle_ms[i]:
        event["throttle_ms"] = batch.throttle_ms[i]
    return event


def _connection(c: Connection) -> dict[str, Any]:
    return {"type": CONNECTION, "v": 1, "ts": c.ts, "broker": c.broker, "listener": c.listener,
            "ip": c.ip, "inter_broker": c.inter_broker}


def _mutation(m: Mutation) -> dict[str, Any]:
    return {"type": MUTATION, "v": 1, "ts": m.ts, "broker": m.broker, "user": m.user,
            "client_id": m.client_id, "api": m.api, "api_version": m.api_version,
            "partitions": m.partitions, "validate_only": m.validate_only}
