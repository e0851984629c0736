"""The offline driver: contract JSON lines in file order through the engine.

A replay of the same input gives the same decisions and directives as the live pipeline
(per-broker scope, one source partition) and as the Spark audit, because all three call
`QuotaEngine`; this module adds only reading, dead-lettering and output shaping.

Configs are on event time (`app.engine.timeline`): a first pass collects every
`quota_config` line of the input, and an event is judged by the configs with `ts <=` its own,
wherever in the file they are. A config line still gets its (empty) line of output.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import orjson

from app.engine.brief import brief
from app.engine.configs import ConfigUpdate
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import BadEvent, StreamClock, parse_record

MAX_LINE_BYTES = 8 * 1024 * 1024


@dataclass
class LineResult:
    """Everything one input line produced."""

    index: int
    output: dict[str, Any]
    directives: list[dict[str, Any]] = field(default_factory=list)
    #: (reason, the offending input) for each dead-lettered event or line
    bad: list[tuple[str, Any]] = field(default_factory=list)


#: Largest dead letter written: well under Kafka's default 1 MB message limit, with room for the
#: key and the record overhead.
MAX_DEADLETTER_BYTES = 512 * 1024


def deadletter_record(reason: str, value: Any, source: str) -> dict[str, Any]:
    """The dead-letter shape every driver writes: the reason, where it came from, the input."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    return {"v": 1, "reason": reason, "source": source, "value": value}


def encode_deadletter(reason: str, value: Any, source: str,
                      limit: int = MAX_DEADLETTER_BYTES) -> bytes:
    """A dead letter as JSON of at most `limit` bytes, whatever the input.

    An input too large for that (or nested too deep to encode again) is cut: `value` holds its
    start as text, with `truncated`, the original's size `value_bytes` and `value_sha256` to
    find it by.
    """
    try:
        encoded = orjson.dumps(deadletter_record(reason, value, source))
        if len(encoded) <= limit:
            return encoded
    except orjson.JSONEncodeError:
        pass
    if isinstance(value, (bytes, bytearray)):
        original = bytes(value)
    else:
        try:
            original = orjson.dumps(value)
        except orjson.JSONEncodeError:
            original = brief(value).encode()
    reason, source = reason[:1024], source[:1024]
    keep = max(0, (limit - 4096) // 6)  # a JSON string takes up to 6 bytes per input byte
    return orjson.dumps({
        **deadletter_record(reason, original[:keep], source), "truncated": True,
        "value_bytes": len(original), "value_sha256": hashlib.sha256(original).hexdigest()})


def file_configs(lines: Iterable[bytes | None]) -> list[ConfigUpdate]:
    """Every valid quota config among contract JSON lines (events, batches, configs), in order.

    Lines that cannot hold one are not parsed (`quota_config` is in every config's JSON), so
    the pass costs little beside the replay itself.
    """
    updates: list[ConfigUpdate] = []
    for line in lines:
        if not line or b"quota_config" not in line or len(line) > MAX_LINE_BYTES:
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        updates.extend(i for i in parse_record(record) if isinstance(i, ConfigUpdate))
    return updates


class Replayer:
    """Feeds decoded records to one engine with one stream clock, shaping per-line output.

    `configs`: the input's configs, all known before the first event (see the module doc).
    """

    def __init__(self, settings: EngineSettings, configs: Iterable[ConfigUpdate] = (),
                 max_skew_ms: int = 86_400_000) -> None:
        self.engine = QuotaEngine(settings)
        self.clock = StreamClock(max_skew_ms)
        for update in configs:
            self.engine.add_config(update)

    def _one(self, item: Any, raw: Any) -> tuple[dict[str, Any], list[dict[str, Any]], tuple[str, Any] | None]:
        if isinstance(item, BadEvent):
            return {"throttle_time_ms": 0, "decisions": [], "error": item.reason}, [], (item.reason, item.raw)
        if isinstance(item, ConfigUpdate):  # in the engine's timeline since the first pass
            return {"throttle_time_ms": 0, "decisions": []}, [], None
        reason = self.clock.check(item.ts)
        if reason is not None:
            return {"throttle_time_ms": 0, "decisions": [], "error": reason}, [], (reason, raw)
        decisions, directives = self.engine.process(item)
        self.engine.expire_due(item.ts)
        return {
            "throttle_time_ms": max((d.throttle_time_ms for d in decisions), default=0),
            "decisions": [d.as_dict() for d in decisions],
        }, directives, None

    def feed(self, index: int, record: Any) -> LineResult:
        """One decoded JSON value (event, batch or config) into its line of output."""
        is_batch = isinstance(record, dict) and record.get("type") == "batch"
        items = parse_record(record)
        if is_batch and not (len(items) == 1 and isinstance(items[0], BadEvent) and items[0].raw is record):
            out = {"index": index, "throttle_time_ms": 0, "events": []}
            result = LineResult(index, out)
            for item, raw in zip(items, record["events"]):
                entry, directives, bad = self._one(item, raw)
                out["events"].append(entry)
                out["throttle_time_ms"] = max(out["throttle_time_ms"], entry["throttle_time_ms"])
                result.directives.extend(directives)
                if bad:
                    result.bad.append(bad)
            return result
        entry, directives, bad = self._one(items[0], record)
        return LineResult(index, {"index": index, **entry}, directives, [bad] if bad else [])

    def feed_line(self, index: int, line: bytes) -> LineResult:
        """One raw input line; undecodable JSON becomes a bad line, never an exception."""
        if len(line) > MAX_LINE_BYTES:
            reason = f"line is {len(line)} bytes (max {MAX_LINE_BYTES})"
        else:
            try:
                return self.feed(index, orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                reason = f"not JSON: {exc}"
        return LineResult(index, {"index": index, "throttle_time_ms": 0, "decisions": [], "error": reason},
                          bad=[(reason, line)])


def replay(lines: Iterable[bytes], settings: EngineSettings,
           configs: Iterable[ConfigUpdate] | None = None) -> Iterator[LineResult]:
    """Replay non-blank lines in order; `index` counts every line, blank ones included.

    `configs`: the input's (`file_configs`), when the caller made the first pass itself (a
    file read twice); None: `lines` is read into memory and scanned here.
    """
    if configs is None:
        lines = [line.strip() for line in lines]
        configs = file_configs(lines)
    replayer = Replayer(settings, configs)
    for index, line in enumerate(lines):
        line = line.strip()
        if line:
            yield replayer.feed_line(index, line)
