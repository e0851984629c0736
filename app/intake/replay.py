"""The offline driver: contract JSON lines in file order through the engine.

A replay of the same input gives the same decisions and directives as the live pipeline
(per-broker scope, one source partition) and as the Spark audit, because all three call
`QuotaEngine`; this module adds only reading, dead-lettering and output shaping.

Configs are on event time (`app.engine.timeline`): a first pass collects every
`quota_config` line of the input, and an event is judged by the configs with `ts <=` its own,
wherever in the file they are. A config line still gets its (empty) line of output; a config
older than one of its key before it is refused (`app.intake.newest_configs`), as by the live
workers: a bad line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson
from typing import Any, Iterable, Iterator, Mapping

from app.engine.configs import ConfigUpdate
from app.engine.engine import Decision, EngineSettings, QuotaEngine
from app.engine.timeline import FOREVER
from app.intake.apply import apply
from app.intake.clock import StreamClock
from app.intake.records import Decoded, FileConfigs, decode_line, file_configs
from app.intake.stream import StreamIntake


@dataclass
class LineResult:
    """Everything one input line produced."""

    index: int
    output: dict[str, Any]
    directives: list[dict[str, Any]] = field(default_factory=list)
    #: (reason, the offending input) for each dead-lettered event or line
    bad: list[tuple[str, Any]] = field(default_factory=list)


class Replayer:
    """Feeds lines to one engine through the intake with one stream clock, shaping per-line
    output.

    `configs`: the input's configs, all known before the first event (see the module doc);
    `refused`: the configs that were not (`FileConfigs.refused`). Lines come out in input
    order, each once its clock judged every event in it (`app.intake.stream`): `feed_line`
    returns those a line lets go, `finish` the rest.
    """

    def __init__(self, settings: EngineSettings, configs: Iterable[ConfigUpdate] = (),
                 max_skew_ms: int = 86_400_000,
                 refused: Mapping[int, list[tuple[int, str]]] | None = None) -> None:
        self.engine = QuotaEngine(settings)
        self.intake: StreamIntake[tuple[int, bytes]] = StreamIntake(StreamClock(max_skew_ms))
        self.refused = refused or {}
        for update in configs:
            self.engine.add_config(update)

    def feed_line(self, index: int, line: bytes) -> list[LineResult]:
        """One raw input line; a bad one becomes a line with its error, never an exception."""
        decoded = decode_line(line, FOREVER)
        if decoded is None:  # a blank line: one item, with nothing in it
            decoded = Decoded(FOREVER)
            decoded.size = 1
        return [self._result(d, i, raw) for d, (i, raw) in self.intake.offer(decoded, (index, line))]

    def finish(self) -> list[LineResult]:
        """The lines still held when the input ends, judged with what is there."""
        return [self._result(d, i, raw) for d, (i, raw) in self.intake.finish()]

    def _result(self, decoded: Decoded, index: int, line: bytes) -> LineResult:
        directives, decisions = apply(self.engine, decoded, decisions=True)
        entries = [_entry(row) for row in decisions]
        result = LineResult(index, {}, directives)
        for i, reason, raw in decoded.dead + self._refused(index, line):
            entries[i]["error"] = reason
            result.bad.append((reason, raw))
        if decoded.batch:
            result.output = {"index": index, "throttle_time_ms": max(
                (e["throttle_time_ms"] for e in entries), default=0), "events": entries}
        else:
            result.output = {"index": index, **entries[0]}
        return result

    def _refused(self, index: int, line: bytes) -> list[tuple[int, str, Any]]:
        """The line's refused configs: (index in the record, why, the config)."""
        found = self.refused.get(index)
        if not found:
            return []
        record = orjson.loads(line)
        items = record["events"] if record.get("type") == "batch" else [record]
        return [(at, why, items[at]) for at, why in found]


def _entry(decisions: list[Decision]) -> dict[str, Any]:
    return {"throttle_time_ms": max((d.throttle_time_ms for d in decisions), default=0),
            "decisions": [d.as_dict() for d in decisions]}


def replay(lines: Iterable[bytes], settings: EngineSettings,
           configs: FileConfigs | None = None) -> Iterator[LineResult]:
    """Replay non-blank lines in order; `index` counts every line, blank ones included.

    `configs`: the input's (`file_configs` of every line), when the caller made the first pass
    itself (a file read twice); None: `lines` is read into memory and scanned here.
    """
    if configs is None:
        lines = [line.strip() for line in lines]
        configs = file_configs(lines)
    replayer = Replayer(settings, configs.updates, refused=configs.refused)
    for index, line in enumerate(lines):
        line = line.strip()
        if line:
            yield from replayer.feed_line(index, line)
    yield from replayer.finish()
