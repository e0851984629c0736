"""Step 2's summaries of the decisions: usage per (window, time bucket) and usage-rate sketches.

Why: they are the audit's default output in place of one row per decision (~2 per event),
which cost step 2 more than the engine. Usage over time, the totals and the recommended quotas
need only these, and both merge: rows of one window and bucket (or one window's sketches) from
different flushes or partitions add up, so step 2 can flush whenever its buffer is full and
Spark finishes the sums.

A **cell** is one window's usage in one time bucket (`bucket = floor(ts / bucket_ms) *
bucket_ms`): decisions, amount recorded, sum and max of `observed`, max limit, throttled
decisions, throttle ms, directives published, first and last `ts`.

A **sketch** is the distribution of one window's usage rate, for the recommendations'
percentiles: `observed` at each decision, except for `controller_mutation_rate`, whose
`observed` is a token balance: its rate at a decision is the partitions mutated by that
window's decisions with `ts` in `(ts - span, ts]`, divided by the span (the controller's
N x W). Rates go to logarithmic bins of relative width `2 * SKETCH_ALPHA`; a percentile read
from them is within `SKETCH_ALPHA` (0.5%) of the exact one, clamped to the exact min and max.
Mutation rates need every decision of the window in `ts` order, so a mutation window keeps
`(ts, partitions)` for its decisions until the partition ends (~70 bytes each, two Python
numbers in lists; controller mutations are rare next to requests); everything else is flushed
when `MAX_CELLS` cells are pending.

Pure and typed: compiled with the engine (`app.engine_build`), as it runs once per decision.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from app.engine import configs as cfg
from app.engine.batch import RequestColumns
from app.engine.engine import NANOS_TO_PERCENT, Decision
from app.engine.events import Event, MutationEvent

#: relative accuracy of a sketch's percentiles
SKETCH_ALPHA: Final = 0.005
_GAMMA: Final = (1.0 + SKETCH_ALPHA) / (1.0 - SKETCH_ALPHA)
_INV_LOG_GAMMA: Final = 1.0 / math.log(_GAMMA)
#: the bins of rates <= 0 and of infinite rates
ZERO_BIN: Final = -(2**31)
TOP_BIN: Final = 2**31 - 1
#: usage time bucket of step 2's cells when no --bucket-ms is given: every automatic bucket
#: (`app.audit.job.auto_bucket_ms`) is a whole number of seconds, so cells roll up exactly
BASE_BUCKET_MS: Final = 1000
#: pending cells that make step 2 flush its summaries (by default)
MAX_CELLS: Final = 100_000

#: what a decision records, as an index into a sample's amounts (`Amounts`)
AMOUNT_OF: Final = {cfg.PRODUCE: 0, cfg.FETCH: 0, cfg.REQUEST: 1, cfg.MUTATION: 2}
ONE: Final = 3
#: a sample's amounts: (bytes, percent of a thread, partitions, 1)
Amounts = tuple[float, float, float, float]


def request_amounts(batch: RequestColumns, i: int) -> Amounts:
    """(bytes, percent of a thread, partitions, 1) as request row `i`'s decisions record them."""
    return (float(batch.bytes[i]), batch.thread_ns[i] * NANOS_TO_PERCENT, 0.0, 1.0)


def event_amounts(event: Event) -> Amounts:
    """The same for a connection or a mutation."""
    if isinstance(event, MutationEvent):
        return (0.0, 0.0, float(event.partitions), 1.0)
    return (0.0, 0.0, 0.0, 1.0)


def rate_bin(rate: float) -> int:
    """The sketch bin of a rate: bin b holds (gamma^(b-1), gamma^b]."""
    if rate <= 0.0:
        return ZERO_BIN
    if math.isinf(rate):
        return TOP_BIN
    return math.ceil(math.log(rate) * _INV_LOG_GAMMA)


def bin_value(b: int) -> float:
    """The value a bin stands for: within SKETCH_ALPHA of every rate in it."""
    if b == ZERO_BIN:
        return 0.0
    if b == TOP_BIN:
        return math.inf
    return 2.0 * _GAMMA ** b / (_GAMMA + 1.0)


class Sketch:
    """A mergeable distribution of rates: counts per `rate_bin`, and the exact min and max."""

    __slots__ = ("bins", "count", "low", "high")

    def __init__(self) -> None:
        self.bins: dict[int, int] = {}
        self.count = 0
        self.low = math.inf
        self.high = -math.inf

    def add(self, rate: float) -> None:
        if math.isnan(rate):  # no usage to speak of
            return
        b = rate_bin(rate)
        bins = self.bins
        bins[b] = bins.get(b, 0) + 1
        self.count += 1
        if rate < self.low:
            self.low = rate
        if rate > self.high:
            self.high = rate

    def merge(self, other: Sketch) -> None:
        bins = self.bins
        for b, n in other.bins.items():
            bins[b] = bins.get(b, 0) + n
        self.count += other.count
        if other.low < self.low:
            self.low = other.low
        if other.high > self.high:
            self.high = other.high

    def state(self) -> tuple[float, float, dict[int, int]]:
        """What a sketch row carries (`marshal`-able)."""
        return (self.low, self.high, self.bins)

    @staticmethod
    def from_state(state: tuple[float, float, dict[int, int]]) -> Sketch:
        sketch = Sketch()
        sketch.low, sketch.high, sketch.bins = state[0], state[1], dict(state[2])
        sketch.count = sum(sketch.bins.values())
        return sketch

    def percentiles(self, qs: list[float]) -> list[float]:
        """Percentiles with linear interpolation between ranks, like
        `app.audit.recommend.percentiles` over the rates themselves (NaN when empty)."""
        n = self.count
        if n == 0:
            return [math.nan for _ in qs]
        order = sorted(self.bins)
        ends: list[int] = []
        total = 0
        for b in order:
            total += self.bins[b]
            ends.append(total)
        out: list[float] = []
        for q in qs:
            pos = q * (n - 1)
            lo = math.floor(pos)
            frac = pos - lo
            a = self._at(lo, order, ends)
            if frac:
                a += (self._at(min(lo + 1, n - 1), order, ends) - a) * frac
            out.append(a)
        return out

    def _at(self, rank: int, order: list[int], ends: list[int]) -> float:
        """The value of the rate at 0-based `rank` in sorted order."""
        if rank == 0:
            return self.low
        if rank == self.count - 1:
            return self.high
        for b, end in zip(order, ends):
            if rank < end:
                return min(max(bin_value(b), self.low), self.high)
        return self.high  # pragma: no cover - ranks end at count - 1


class Cell:
    """One window's usage in one time bucket (module docstring)."""

    __slots__ = ("decisions", "amount", "sum_observed", "max_observed", "limit", "throttled",
                 "throttle_ms", "directives", "first_ts", "last_ts")

    def __init__(self, ts: int) -> None:
        self.decisions = 0
        self.amount = 0.0
        self.sum_observed = 0.0
        self.max_observed = -math.inf
        self.limit = -math.inf
        self.throttled = 0
        self.throttle_ms = 0
        self.directives = 0
        self.first_ts = ts
        self.last_ts = ts


class WindowSummary:
    """One window's cells since the last flush, its rate sketch and its latest limit."""

    __slots__ = ("entity", "quota", "broker", "amount_of", "mutation", "cells", "bucket", "cell",
                 "sketch", "last_ts", "limit", "level", "throttled", "times", "amounts")

    def __init__(self, entity: str, quota: str, broker: int | None) -> None:
        self.entity = entity
        self.quota = quota
        self.broker = broker
        #: which of a sample's amounts its decisions record
        self.amount_of: int = AMOUNT_OF.get(quota, ONE)
        self.mutation = quota == cfg.MUTATION
        self.cells: dict[int, Cell] = {}
        self.bucket = -(2**62)
        self.cell: Cell | None = None
        self.sketch = Sketch()
        self.last_ts = -(2**62)
        self.limit = 0.0
        self.level: str | None = None
        self.throttled = 0
        self.times: list[int] = []
        self.amounts: list[float] = []

    def mutation_rates(self, span_ms: int) -> None:
        """The rate at each kept mutation decision into the sketch (module docstring)."""
        order = sorted(range(len(self.times)), key=self.times.__getitem__)
        times = [self.times[k] for k in order]
        amounts = [self.amounts[k] for k in order]
        seconds = span_ms / 1000.0
        start = 0
        total = 0.0
        end = 0
        n = len(times)
        for k in range(n):
            ts = times[k]
            while end < n and times[end] <= ts:  # equal ts: all of them are in the frame
                total += amounts[end]
                end += 1
            while times[start] <= ts - span_ms:
                total -= amounts[start]
                start += 1
            self.sketch.add(total / seconds)
        self.times = []
        self.amounts = []


#: A usage row: entity, quota, broker, bucket, decisions, amount, sum_observed, max_observed,
#: limit, throttled, throttle_ms, directives, first_ts, last_ts.
UsageRow = tuple[str, str, "int | None", int, int, float, float, float, float, int, int, int,
                 int, int]
#: A sketch row: entity, quota, broker, decisions, throttled, last ts, limit and level at it,
#: max rate, the sketch's state.
SketchRow = tuple[str, str, "int | None", int, int, int, float, "str | None", float,
                  tuple[float, float, dict[int, int]]]


class Summaries:
    """Step 2's summaries of one route partition (module docstring)."""

    def __init__(self, bucket_ms: int, mutation_span_ms: int,
                 names: Callable[[dict[str, Any]], str],
                 report_from: int | None = None, report_to: int | None = None,
                 max_cells: int = MAX_CELLS) -> None:
        """`names`: the entity's name for a decision (`entity_string` of its entity dict)."""
        self.bucket_ms = bucket_ms
        self.max_cells = max_cells
        self.span_ms = mutation_span_ms
        self.names = names
        self.lo = -(2**63) if report_from is None else report_from
        self.hi = 2**63 - 1 if report_to is None else report_to
        self.windows: dict[str, WindowSummary] = {}
        self.cells = 0

    def requests(self, batch: RequestColumns, decisions: list[list[Decision]],
                 published: dict[int, list[int]]) -> None:
        """The decisions of a batch's request rows (`published`: for the rows that published
        directives, the indexes of those decisions)."""
        none: list[int] = []
        sizes, thread = batch.bytes, batch.thread_ns
        for i in range(len(decisions)):
            made = decisions[i]
            if made:
                self._add(float(sizes[i]), thread[i] * NANOS_TO_PERCENT, 0.0, made,
                          published.get(i, none) if published else none)

    def add(self, amounts: Amounts, decisions: list[Decision], published: list[int]) -> None:
        """One sample's decisions (those with `ts` in the reported range), with its amounts
        and the indexes of the decisions that published a directive."""
        self._add(amounts[0], amounts[1], amounts[2], decisions, published)

    def _add(self, nbytes: float, percent: float, partitions: float, decisions: list[Decision],
             published: list[int]) -> None:
        bucket_ms = self.bucket_ms
        windows = self.windows
        for di in range(len(decisions)):
            d = decisions[di]
            ts = d.ts
            if ts < self.lo or ts >= self.hi:
                continue
            w = windows.get(d.key)
            if w is None:
                w = windows[d.key] = WindowSummary(self.names(d.entity), d.quota, d.broker)
            bucket = ts - ts % bucket_ms
            cell = w.cell
            if bucket != w.bucket or cell is None:
                cell = w.cells.get(bucket)
                if cell is None:
                    cell = w.cells[bucket] = Cell(ts)
                    self.cells += 1
                w.bucket = bucket
                w.cell = cell
            at = w.amount_of
            amount = nbytes if at == 0 else percent if at == 1 else partitions if at == 2 else 1.0
            observed = d.observed
            cell.decisions += 1
            cell.amount += amount
            cell.sum_observed += observed
            if observed > cell.max_observed:
                cell.max_observed = observed
            if d.limit > cell.limit:
                cell.limit = d.limit
            throttle = d.throttle_time_ms
            if throttle > 0:
                cell.throttled += 1
                cell.throttle_ms += throttle
                w.throttled += 1
            if published and di in published:
                cell.directives += 1
            if ts < cell.first_ts:
                cell.first_ts = ts
            if ts > cell.last_ts:
                cell.last_ts = ts
            if ts >= w.last_ts:
                w.last_ts = ts
                w.limit = d.limit
                w.level = d.config_level
            if w.mutation:
                w.times.append(ts)
                w.amounts.append(amount)
            else:
                w.sketch.add(observed)

    def full(self) -> bool:
        return self.cells >= self.max_cells

    def flush(self, final: bool) -> tuple[list[UsageRow], list[SketchRow]]:
        """The pending rows; mutation windows only at the end (`final`), see the module
        docstring. Other windows are forgotten (their rows merge with later ones)."""
        usage: list[UsageRow] = []
        sketches: list[SketchRow] = []
        keep: dict[str, WindowSummary] = {}
        for key, w in self.windows.items():
            for bucket, c in w.cells.items():
                usage.append((w.entity, w.quota, w.broker, bucket, c.decisions, c.amount,
                              c.sum_observed, c.max_observed, c.limit, c.throttled,
                              c.throttle_ms, c.directives, c.first_ts, c.last_ts))
            if w.mutation and not final:
                w.cells = {}
                w.cell = None
                keep[key] = w
                continue
            if w.mutation:
                w.mutation_rates(self.span_ms)
            s = w.sketch
            if s.count:
                sketches.append((w.entity, w.quota, w.broker, s.count, w.throttled, w.last_ts,
                                 w.limit, w.level, s.high, s.state()))
        self.windows = keep
        self.cells = 0
        return usage, sketches
