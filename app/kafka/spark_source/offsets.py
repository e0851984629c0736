"""The data source's planning, pure: offset options, the `[start, end)` range of each
partition, input partitions of bounded size, micro-batch caps, and stream offsets as JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

try:  # pyspark (the `audit` extra) is optional: the planning must import without it
    from pyspark.sql.datasource import InputPartition
except ImportError:  # pragma: no cover - exercised only where pyspark is absent

    class InputPartition:  # type: ignore[no-redef]
        """Stand-in so `OffsetRange` (and the planning tests) work without pyspark."""

__all__ = ["EARLIEST", "LATEST", "TP", "OffsetRange", "OffsetSpec", "cap_offsets",
           "offsets_from_json", "offsets_to_json", "parse_offsets", "plan_partitions",
           "resolve_ranges"]

#: Spark's Kafka source convention for per-partition offsets in the JSON option.
EARLIEST = -2
LATEST = -1

TP = tuple[str, int]
#: "earliest", "latest", or {(topic, partition): offset or EARLIEST/LATEST}.
OffsetSpec = Literal["earliest", "latest"] | dict[TP, int]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark input partition: offsets `[start, end)` of one (topic, partition).

    A plain picklable value: it travels from the planner to an executor.
    """

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        """Offsets in the range (records, unless the log has gaps from compaction/markers)."""
        return self.end - self.start


def parse_offsets(raw: str | None, *, default: Literal["earliest", "latest"]) -> OffsetSpec:
    """Parse a `starting_offsets` / `ending_offsets` option value.

    Accepts `earliest`, `latest` or Spark's JSON form `{"topic": {"0": 42, "1": -2}}` so a job
    written for Spark's Kafka source keeps its options. Raises `ValueError` on anything else.
    """
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return "earliest" if text.lower() == "earliest" else "latest"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"offsets must be 'earliest', 'latest' or JSON like {{\"topic\": {{\"0\": 42}}}}: "
            f"{exc}"
        ) from None
    # ValueError, not TypeError, for bad shapes: it is a bad option value, reported as such.
    if not isinstance(parsed, dict):
        raise ValueError("offsets JSON must be an object {topic: {partition: offset}}")  # noqa: TRY004
    spec: dict[TP, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise ValueError(  # noqa: TRY004
                f"offsets for topic {topic!r} must be an object {{partition: offset}}"
            )
        for part, offset in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise ValueError(f"partition {part!r} of topic {topic!r} is not an integer") from None
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(  # noqa: TRY004
                    f"offset of {topic}/{partition} must be an integer, got {offset!r}"
                )
            if offset < EARLIEST:
                raise ValueError(
                    f"offset of {topic}/{partition} is {offset}: use >= 0, -2 (earliest) "
                    "or -1 (latest)"
                )
            spec[(str(topic), partition)] = offset
    return spec


def _pick(spec: OffsetSpec, tp: TP, earliest: int, latest: int, missing: int) -> int:
    if spec == "earliest":
        return earliest
    if spec == "latest":
        return latest
    assert isinstance(spec, dict)
    offset = spec.get(tp, missing)
    if offset == EARLIEST:
        return earliest
    if offset == LATEST:
        return latest
    return offset


def resolve_ranges(
    earliest: Mapping[TP, int],
    latest: Mapping[TP, int],
    starting: OffsetSpec = "earliest",
    ending: OffsetSpec = "latest",
    *,
    fail_on_data_loss: bool = True,
) -> dict[TP, tuple[int, int]]:
    """Turn offset specs into concrete `[start, end)` per partition.

    `earliest` / `latest` are the log start and the *true* end (high watermark) of every
    partition to read. An end beyond the high watermark is clamped to it (those records do not
    exist yet); a start below the log start raises unless `fail_on_data_loss` is false, because
    the records were deleted and a job must not pretend it read them. A start past the end
    gives an empty range. JSON specs naming partitions that are not being read are an error:
    they are almost always a typo in a topic name.
    """
    for name, spec in (("starting_offsets", starting), ("ending_offsets", ending)):
        if isinstance(spec, dict):
            unknown = sorted(set(spec) - set(latest))
            if unknown:
                listed = ", ".join(f"{t}/{p}" for t, p in unknown)
                raise ValueError(f"{name} names partitions that are not being read: {listed}")
    ranges: dict[TP, tuple[int, int]] = {}
    for tp in sorted(latest):
        low, high = earliest.get(tp, 0), latest[tp]
        start = _pick(starting, tp, low, high, missing=EARLIEST)
        end = _pick(ending, tp, low, high, missing=LATEST)
        if start < low:
            if fail_on_data_loss:
                raise ValueError(
                    f"{tp[0]}/{tp[1]}: start offset {start} is below the log start {low} "
                    "(records deleted); set fail_on_data_loss=false to start at the log start"
                )
            start = low
        end = min(end, high)
        start = min(start, end)
        ranges[tp] = (start, end)
    return ranges


def plan_partitions(
    ranges: Mapping[TP, tuple[int, int]], max_records_per_partition: int
) -> list[OffsetRange]:
    """Split `{(topic, partition): (start, end)}` into input partitions of bounded size.

    A range of n offsets becomes ceil(n / max) chunks of near-equal size (they differ by at
    most one), so tasks are balanced instead of a full chunks plus a tiny tail. Empty ranges
    produce nothing. The order is deterministic (topic, partition, start), which keeps task
    numbering stable between runs.
    """
    if max_records_per_partition < 1:
        raise ValueError("max_records_per_partition must be >= 1")
    planned: list[OffsetRange] = []
    for (topic, partition), (start, end) in sorted(ranges.items()):
        if start < 0 or end < 0:
            raise ValueError(f"{topic}/{partition}: unresolved offsets ({start}, {end})")
        count = end - start
        if count <= 0:
            continue
        chunks = math.ceil(count / max_records_per_partition)
        base, extra = divmod(count, chunks)
        offset = start
        for index in range(chunks):
            size = base + (1 if index < extra else 0)
            planned.append(OffsetRange(topic, partition, offset, offset + size))
            offset += size
        assert offset == end
    return planned


def cap_offsets(
    start: Mapping[TP, int], latest: Mapping[TP, int], max_rows: int | None
) -> dict[TP, int]:
    """End offsets for one micro-batch: `latest`, or fewer so at most `max_rows` are read.

    Rows are shared fairly: every partition with backlog gets an equal share, and the share a
    partition cannot use goes to the others, so one hot partition cannot starve the rest.
    Partitions absent from `start` begin at 0 (callers put the log start there).
    """
    begin = {tp: min(start.get(tp, 0), high) for tp, high in latest.items()}
    if max_rows is None:
        return dict(latest)
    if max_rows < 0:
        raise ValueError("max_rows must be >= 0")
    end = dict(begin)
    backlog = {tp: latest[tp] - begin[tp] for tp in latest if latest[tp] > begin[tp]}
    budget = max_rows
    while budget > 0 and backlog:
        share = max(budget // len(backlog), 1)
        for tp in sorted(backlog):
            take = min(share, backlog[tp], budget)
            end[tp] += take
            backlog[tp] -= take
            budget -= take
            if budget == 0:
                break
        backlog = {tp: left for tp, left in backlog.items() if left > 0}
    return end


def offsets_to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """`{(topic, p): o}` -> `{"topic": {"p": o}}`: Spark checkpoints stream offsets as JSON."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> dict[TP, int]:
    """Inverse of `offsets_to_json`."""
    return {(topic, int(p)): int(o) for topic, parts in data.items() for p, o in parts.items()}
