"""Record bytes in, validated samples and dead letters out: the one intake every driver calls.

The live ingest, `replay`, the audit's step 1, `explain` and the simulator read events through
`decode_source` (a Kafka record value) or `decode_line` (an archive line), then through their
stream's clock (`app.intake.stream`), so each input is judged by the same rules in the same
order:

1. the value is a columnar batch (`app.intake.columnar`) or JSON (a single event or a batch);
   one that is neither is one dead letter;
2. each row or event is validated (`app.engine.events.parse_event`, or the column rules);
3. a `quota_config` on an event stream is a dead letter (its place is the config topic); in
   an archive it is skipped here, having been collected beforehand (`file_configs`);
4. each valid sample's `ts` is judged by its stream's clock, in record order (`Decoded.judge`
   takes the verdicts).

Request samples come out as columns (`RequestColumns`), connections and mutations as events;
each keeps its index in the record (the audit's sort key, replay's output order).
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

import orjson

from app.engine.batch import RequestColumns
from app.engine.configs import ConfigUpdate
from app.engine.engine import nanos
from app.engine.events import BadEvent, Event, RequestEvent, parse_event, parse_record
from app.intake import columnar
from app.intake.newest_configs import NewestConfigs

#: Longest archive line read (a Kafka record is bounded by the broker instead).
MAX_LINE_BYTES = 8 * 1024 * 1024
CONFIG_ON_EVENT_TOPIC = "quota_config records belong on the config topic"


class Decoded:
    """What one record holds: good request rows (columns), good other events, dead letters.

    `request_at[k]` / `other_at[k]`: the index in the record of request row k / other event k;
    `dead`: (index, reason, the offending input); `size`: items in the record; `configs`:
    how many `quota_config` items an archive line held (skipped). `stamps[k]`: the `ts` of
    each valid sample in record order, for the stream clock, and `judged_at[k]` its index in
    the record; until `judge` has the clock's verdicts, every valid sample is among the good.
    """

    __slots__ = ("requests", "request_at", "others", "other_at", "dead", "size", "configs",
                 "arrival", "batch", "stamps", "judged_at", "raws")

    def __init__(self, arrival: int) -> None:
        #: the record's Kafka timestamp (archives: `timeline.FOREVER` or their own column)
        self.arrival = arrival
        self.requests = RequestColumns()
        self.request_at: list[int] = []
        self.others: list[Event] = []
        self.other_at: list[int] = []
        self.dead: list[tuple[int, str, Any]] = []
        self.size = 0
        self.configs = 0
        #: a batch record (JSON batch or columnar), not a single event
        self.batch = False
        self.stamps: list[int] = []
        self.judged_at: list[int] = []
        #: a JSON record's items as read, for the dead letters of refused ones (None: columnar)
        self.raws: list[Any] | None = None

    def bad(self, reason: str, raw: Any) -> Decoded:
        """The whole record as one dead letter."""
        self.dead.append((0, reason, raw))
        self.size = 1
        return self

    def judge(self, refused: list[tuple[int, str]]) -> None:
        """The stream clock's verdicts: (k, reason) for each sample `stamps[k]` it refused,
        which leaves the good ones for the dead letters, in record order."""
        raws = self.raws
        self.raws = None
        if not refused:
            return
        out = {self.judged_at[k]: reason for k, reason in refused}
        dead = self.dead
        keep: list[int] = []
        request_at = self.request_at
        requests = self.requests
        for p in range(len(request_at)):
            index = request_at[p]
            reason = out.get(index)
            if reason is None:
                keep.append(p)
            else:
                dead.append((index, reason, columnar.row_object(requests, p) if raws is None
                             else raws[index]))
        if len(keep) < len(request_at):
            self.requests = columnar.take(requests, keep)
            self.request_at = [request_at[p] for p in keep]
        others: list[Event] = []
        other_at: list[int] = []
        for event, index in zip(self.others, self.other_at):
            reason = out.get(index)
            if reason is None:
                others.append(event)
                other_at.append(index)
            else:
                dead.append((index, reason, raws[index] if raws is not None else None))
        self.others, self.other_at = others, other_at
        dead.sort(key=lambda d: d[0])


def decode_source(value: bytes | None, arrival: int) -> Decoded:
    """An event-topic record (`arrival`: its Kafka timestamp), not yet judged by its clock."""
    if value is None:
        return Decoded(arrival).bad("not JSON: empty record value", b"")
    if columnar.is_columnar(value):
        return _columnar(value, arrival)
    try:
        record = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return Decoded(arrival).bad(f"not JSON: {exc}", value)
    return decode_json(record, arrival, archive=False)


def decode_line(line: bytes, arrival: int) -> Decoded | None:
    """An archive line (JSON lines, as `replay` reads them), not yet judged by its clock; None
    for a blank line."""
    line = line.strip()
    if not line:
        return None
    if len(line) > MAX_LINE_BYTES:
        return Decoded(arrival).bad(f"line is {len(line)} bytes (max {MAX_LINE_BYTES})", line)
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return Decoded(arrival).bad(f"not JSON: {exc}", line)
    return decode_json(record, arrival, archive=True)


def decode_json(record: Any, arrival: int, archive: bool) -> Decoded:
    """A decoded JSON value: a single event, a config, or a batch of them."""
    out = Decoded(arrival)
    items = parse_record(record)
    out.size = len(items)
    is_batch = isinstance(record, dict) and record.get("type") == "batch"
    whole = len(items) == 1 and isinstance(items[0], BadEvent) and items[0].raw is record
    out.batch = is_batch and not whole
    raws: list[Any] = record["events"] if out.batch else [record]
    requests = out.requests
    stamps = out.stamps
    judged_at = out.judged_at
    for i in range(len(items)):
        item = items[i]
        if isinstance(item, BadEvent):
            out.dead.append((i, item.reason, raws[i]))
            continue
        if isinstance(item, ConfigUpdate):
            if archive:
                out.configs += 1
            else:
                out.dead.append((i, CONFIG_ON_EVENT_TOPIC, raws[i]))
            continue
        stamps.append(item.ts)
        judged_at.append(i)
        if type(item) is RequestEvent:
            requests.append(item.ts, item.broker, item.gateway, item.listener, item.user,
                            item.client_id, item.ip, item.api, item.bytes, nanos(item.thread_ms),
                            nanos(item.network_ms), item.exempt, item.count, arrival, 0,
                            item.throttle_ms)
            out.request_at.append(i)
        else:
            out.others.append(item)
            out.other_at.append(i)
    if stamps:
        out.raws = raws
    return out


def _columnar(value: bytes, arrival: int) -> Decoded:
    out = Decoded(arrival)
    try:
        batch, internal = columnar.decode(value)
    except columnar.ColumnarError as exc:
        return out.bad(str(exc), value)
    if internal:
        return out.bad("columnar batch: an internal record on an event topic", value)
    n = len(batch)
    out.size = n
    out.batch = True
    problems = columnar.row_problems(batch)
    batch.arrival = [arrival] * n
    if not problems:
        out.requests = batch
        out.request_at = out.judged_at = list(range(n))
        out.stamps = batch.ts
        return out
    good = [i for i in range(n) if i not in problems]
    for i, reason in sorted(problems.items()):
        out.dead.append((i, reason, columnar.row_object(batch, i)))
    out.requests = columnar.take(batch, good)
    out.request_at = out.judged_at = good
    out.stamps = out.requests.ts
    return out


def decode_config(value: bytes | None) -> tuple[ConfigUpdate | None, str | None]:
    """A config-topic record value: its update, or None and the reason it is bad."""
    try:
        item = parse_event(orjson.loads(value or b""))
    except orjson.JSONDecodeError as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(item, ConfigUpdate):
        return None, getattr(item, "reason", "not a quota_config record")
    return item, None


def event_timestamps(value: bytes | None) -> list[int]:
    """The `ts` of every sample of a source record that its stream clock judges, in order:
    what rebuilds a partition's clock (`StreamClock.seed`)."""
    if value is None:
        return []
    if columnar.is_columnar(value):
        try:
            batch, internal = columnar.decode(value)
        except columnar.ColumnarError:
            return []
        if internal:
            return []
        problems = columnar.row_problems(batch)
        return [batch.ts[i] for i in range(len(batch)) if i not in problems]
    try:
        record = orjson.loads(value)
    except orjson.JSONDecodeError:
        return []
    return [item.ts for item in parse_record(record)
            if not isinstance(item, (BadEvent, ConfigUpdate))]


class FileConfigs(NamedTuple):
    """An archive's configs: the ones in force, in order, and why a line's were refused."""

    updates: list[ConfigUpdate]
    #: index of a line among those read -> (index of a config in its record, why), for each
    #: config refused (a stale one: `newest_configs`)
    refused: dict[int, list[tuple[int, str]]]


def file_configs(lines: Iterable[bytes | None]) -> FileConfigs:
    """Every valid quota config among archive lines (events, batches, configs), in order, but
    those older than one of their key read before (`NewestConfigs`, as every driver).

    Lines that cannot hold one are not parsed (`quota_config` is in every config's JSON), so
    the pass costs little beside the replay itself.
    """
    newest = NewestConfigs()
    found = FileConfigs([], {})
    for index, line in enumerate(lines):
        if not line or b"quota_config" not in line or len(line) > MAX_LINE_BYTES:
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        for at, item in enumerate(parse_record(record)):
            if not isinstance(item, ConfigUpdate):
                continue
            refused = newest.offer(item)
            if refused is None:
                found.updates.append(item)
            else:
                found.refused.setdefault(index, []).append((at, refused))
    return found
