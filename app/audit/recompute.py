"""Recompute decisions and directives with the project's engine, per entity and in order.

The audit does not re-implement the quota rules in SQL (window functions were measurably wrong
on throttle decisions): it runs `QuotaEngine`, the code the live workers and `replay` run, over
the same events in an order that gives the same results. This module is that order and the two
pure steps around it; `app.audit.frames` wires them into Spark, and `recompute_local` runs them
in-process (tests, `explain`, the benchmark's expected directives).

Step 1, explode (one sequential pass per input stream): records -> validated events, each with
its route key (`app.intake.routes`, which co-locates every window the event touches) and
its sort key, packed into chunks per route partition. Bad input becomes dead-letter items with
the reason every driver gives.
Step 2, run (one engine per route partition): chunks merged into sort-key order -> decisions
and directives. Windows are independent, so any partitioning by route key gives the same
results.

What "in order" means (the rules; docs/audit.md has the long form)
-------------------------------------------------------------------

* **Streams.** Kafka input: every (topic, partition) of an event topic is one stream, read in
  offset order, with its own `StreamClock` skew check, as the live ingest agent does. Archive
  input (JSON lines, event Parquet): the whole archive is *one* stream, files in path order then
  lines in file order, with one clock, exactly like `replay` of the concatenated files.
* **Sort key** `(t, s, pos, i)`. Kafka: `t` = the stream time after the event (the largest
  accepted `ts` of its stream so far), `s` = the stream's index, `pos` = the offset, `i` = the
  index inside a batch record. Archive: `t = 0`, `s` = the file's rank, `pos` = its row id. Within
  one stream the key grows with the input position, so a window fed by one stream sees exactly
  its input order (replay's order). Windows fed by several partitions of a topic see the streams
  merged by stream time (the live order is a race there; this one is deterministic).
* **Configs.** On event time, as in every driver (`app.engine.timeline`): each engine holds
  every config with its arrival, and an event is judged by the configs with `ts <=` its own
  that had arrived (less half the grace) by its record's Kafka timestamp. So the order configs
  and events are read in does not matter. Kafka: the config topic's records with their Kafka
  timestamps (in (partition, offset) order for equal `ts`), and each event record's timestamp
  as its arrival; a `quota_config` record on an event topic is dead-lettered, as live.
  Archive: the `quota_config` lines (and batch items) of the whole archive, collected before
  step 1 (`app.intake.records.file_configs`), in force from their `ts`, like `replay`; a Kafka-shaped
  archive carries its `timestamp` column like Kafka.
* **Split requests.** When a request's quota types resolve to windows with different route keys
  (a client-id quota of one type, a user quota of another), replay handles the whole request at
  once (a throttled fetch takes its bytes back from the fetch window even if only the request
  time quota throttled). The audit keeps that exact: such route keys are merged (union-find over
  the key sets of split requests) so one engine sees the whole request.
* **Time bounds** select events by their own `ts` (`[from - warmup, to)`) and report decisions
  with `ts` in `[from, to)`; `stop_after` (explain) keeps each stream's prefix whose stream time
  is `<= stop_after`.
"""

from __future__ import annotations

import contextlib
import gc
import marshal
import os
import zlib
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any


from app.engine import configs as cfg
from app.engine.configs import ConfigUpdate
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.batch import RequestColumns
from app.engine.engine import Decision
from app.intake.clock import StreamClock
from app.engine.timeline import FOREVER, ConfigTimeline
from app.intake.apply import apply_samples
from app.intake.deadletter import encode_deadletter
from app.intake.newest_configs import NewestConfigs
from app.intake.records import Decoded, decode_config, decode_line, decode_source, file_configs
from app.intake.routes import RouteCache, Routes
from app.intake.stream import StreamIntake
from app.signing import Signing

from app.audit.event_codec import (
    EVENT_CLASSES,
    MARSHAL_VERSION,
    event_args,
)
from app.audit.request_items import (
    ROW_REQUEST,
    RequestPlacer,
    gather_requests,
    request_payload,
)
from app.audit.common import entity_string
from app.audit.results import DECISION_COLUMNS, ResultRows, result_schema
from app.audit.summaries import BASE_BUCKET_MS, Summaries, event_amounts

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

MODE_KAFKA = "kafka"
MODE_FILE = "file"
DEFAULT_MAX_SKEW_MS = 86_400_000

Key = tuple[int, int, int, int]

#: Step 1 output: one row per chunk of items bound for one step-2 partition (`rk` is that
#: partition's pinned route key), keyed by its first item; `items` = the `marshal`led list.
#: An item is `(t, s, pos, i, k, payload, arrival)`, its sort key then what it holds: `k` = an
#: event kind of `app.audit.event_codec` (payload: the event's constructor arguments) or
#: ROW_BAD (payload: `(reason, the dead-letter record's JSON)`); `arrival` = the Kafka
#: timestamp of the event's record (FOREVER for an archive's lines).
EXPLODED_DDL = "rk string, t long, s int, pos long, i int, items binary"
ROW_BAD = 2
#: request rows step 2 hands the engine at once at most
REQUEST_BATCH = 4096
Item = tuple[int, int, int, int, int, Any, int]
#: A config update and its record's Kafka timestamp (None: from an archive's lines).
ConfigEntry = tuple[ConfigUpdate, "int | None"]
#: A record read from a topic: (partition, offset, key, value, Kafka timestamp ms).
TopicRecord = tuple[int, int, "bytes | None", "bytes | None", "int | None"]
#: Step 1 in discovery mode: the route keys of requests that resolve to several keys.
SPLITS_DDL = "keys string"
KEY_SEP = "\x1e"


def exploded_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        ("rk", pa.string()), ("t", pa.int64()), ("s", pa.int32()), ("pos", pa.int64()),
        ("i", pa.int32()), ("items", pa.binary()),
    ])


# -- configs ---------------------------------------------------------------------------------


def topic_configs(
    records: Iterable[TopicRecord], topic: str = "", signing: Signing = Signing(),
) -> tuple[list[ConfigEntry], list[tuple[str, str]]]:
    """Config-topic records -> config entries in (partition, offset) order, and the bad ones
    skipped as the workers skip them (unsealed ones too, when `signing` has keys, and stale
    ones: `app.intake.newest_configs`): `(where, reason)` each."""
    newest = NewestConfigs()
    entries: list[ConfigEntry] = []
    bad: list[tuple[str, str]] = []
    for partition, offset, key, value, timestamp in sorted(records, key=lambda r: (r[0], r[1])):
        payload, reason = signing.open(topic, key, value or b"")
        update, reason = (None, reason) if payload is None else decode_config(payload)
        if update is not None and (stale := newest.offer(update)) is not None:
            update, reason = None, stale
        if update is None:
            bad.append((f"{topic}/{partition}@{offset}", reason or "bad config"))
            continue
        entries.append((update, timestamp))
    return entries, bad


def archive_configs(values: Iterable[bytes | None]
                    ) -> tuple[list[ConfigEntry], list[tuple[str, str]]]:
    """An archive's configs (its lines in order; a superset of lines may be passed), and the
    ones refused as `replay` refuses them: `(where: the n-th line passed, reason)` each."""
    found = file_configs(v.strip() if v else v for v in values)
    bad = [(f"archive config line {index + 1}", why)
           for index, refused in found.refused.items() for _, why in refused]
    return [(update, None) for update in found.updates], bad


def config_timeline(entries: Iterable[ConfigEntry], grace_ms: int) -> ConfigTimeline:
    timeline = ConfigTimeline(grace_ms=grace_ms)
    for update, arrival in entries:
        timeline.add(update, arrival)
    return timeline


def engine_with_configs(settings: EngineSettings, entries: Iterable[ConfigEntry]) -> QuotaEngine:
    """An engine that knows every config of the input, each at its time and arrival."""
    engine = QuotaEngine(settings)
    for update, arrival in entries:
        engine.add_config(update, arrival)
    return engine


# -- routing ---------------------------------------------------------------------------------


#: A step-1 route: the route key (all keys of a split request), and the keys without their
#: broker (what `ExplodeContext.keep` names).
Route = tuple["str | tuple[str, ...]", frozenset[str]]


def route_texts(keys: Routes) -> Route:
    """How step 1 places a route (`RouteCache`): its key texts, and their entities."""
    texts = tuple(k.text for k, _ in keys)
    return texts if len(texts) > 1 else texts[0], frozenset(k.entity.text for k, _ in keys)


def splits_possible(entries: Iterable[ConfigEntry], grace_ms: int) -> bool:
    """Could a request resolve its quota types to different route keys under these configs?

    Every configs an event can be judged by is checked (`ConfigTimeline.states`).
    Conservative: True may still find no split in the data (the audit then runs a discovery
    pass for nothing); False is certain. A split needs `request_percentage` and a byte rate in
    force together, one able to resolve to a client-id window while the other resolves to a
    user window.
    """
    states = config_timeline(entries, grace_ms).states()
    if states is None:
        return True
    for configs in states:
        request = configs.entity_kinds(cfg.REQUEST)
        if not request:
            continue
        for other in (cfg.PRODUCE, cfg.FETCH):
            kinds = configs.entity_kinds(other)
            if kinds and len(request | kinds) > 1:
                return True
    return False


def route_map_from_splits(key_sets: Iterable[Sequence[str]]) -> dict[str, str]:
    """Union-find over route keys that one request touches: key -> its group's smallest key.

    Only keys of some split appear; every other key is its own group.
    """
    parent: dict[str, str] = {}

    def find(k: str) -> str:
        root = k
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(k, k) != root:
            parent[k], k = root, parent[k]
        return root

    for keys in key_sets:
        keys = list(keys)
        for k in keys:
            parent.setdefault(k, k)
        for a, b in zip(keys, keys[1:]):
            ra, rb = find(a), find(b)
            if ra != rb:
                lo, hi = (ra, rb) if ra < rb else (rb, ra)
                parent[hi] = lo
    return {k: find(k) for k in parent}


# -- step 1: explode -------------------------------------------------------------------------


@dataclass(frozen=True)
class ExplodeContext:
    """Everything step 1 needs, shipped to every task (configs are small)."""

    settings: EngineSettings
    mode: str
    configs: tuple[ConfigEntry, ...] = ()
    #: Kafka mode: (topic, partition) -> stream index `s`. File mode: file -> rank.
    streams: Mapping[Any, int] = field(default_factory=dict)
    route_map: Mapping[str, str] | None = None
    event_from: int | None = None
    event_to: int | None = None
    stop_after: int | None = None
    max_skew_ms: int = DEFAULT_MAX_SKEW_MS
    #: Kafka mode: (topic, partition) -> the event timestamps before the stream's first record
    #: read (`app.kafka.clock_seed`), for a stream read from past its log start
    seeds: Mapping[Any, tuple[int, ...]] = field(default_factory=dict)
    discover: bool = False
    #: One route key per step-2 partition (`ExplodedRows.to_batch`); an archive's inline
    #: config is sent to each.
    pinned: tuple[str, ...] = ("",)
    #: Keep only events touching these route keys (broker prefix stripped: `u:alice`, `c:app`,
    #: `connections`); for `explain`, which needs one entity's windows only.
    keep: frozenset[str] | None = None


class ExplodedRows:
    """Step 1's output buffer: one chunk of items per step-2 partition (`to_batch` packs them).

    Why chunks: one Spark row per event cost the JVM (Arrow to rows, shuffle, sort, rows to
    Arrow) and both Python steps (an Arrow column per field, a `marshal` call per event) more
    than the engine itself; a chunk of thousands of items is one row and one `marshal` call.
    An item goes to partition `crc32(route key) mod N` (stable across processes, unlike
    `hash`) of the N pinned keys; its chunk's row carries that partition's pinned key, which
    Spark's `repartition(N, "rk")` sends exactly there.
    """

    __slots__ = ("_parts", "chunks", "pinned", "size", "splits")

    def __init__(self, pinned: Sequence[str] = ("",)) -> None:
        self.pinned = tuple(pinned)
        self.chunks: list[list[Item]] = [[] for _ in self.pinned]
        self.size = 0
        self.splits: set[str] = set()
        self._parts: dict[str, int] = {}

    def __len__(self) -> int:
        return self.size

    def partition(self, rk: str) -> int:
        """The step-2 partition of a route key (a pinned key: its own partition)."""
        p = self._parts.get(rk)
        if p is None:
            pinned = self.pinned
            p = self._parts[rk] = (pinned.index(rk) if rk in pinned
                                   else zlib.crc32(rk.encode()) % len(pinned))
        return p

    def clear(self) -> None:
        """Drop the buffered items (the partition cache and the pinned keys stay)."""
        self.chunks = [[] for _ in self.pinned]
        self.size = 0

    def items(self) -> Iterator[Item]:
        """Every buffered item, partition by partition."""
        for chunk in self.chunks:
            yield from chunk

    def bad(self, key: Key, reason: str, raw: Any, where: str) -> None:
        self.chunks[self.partition("")].append(
            (*key, ROW_BAD, (reason, encode_deadletter(reason, raw, where)), 0))
        self.size += 1

    def to_batch(self) -> pa.RecordBatch:
        """One chunk row per partition that has items, each chunk sorted by key (a task may
        read several streams), so its first item is its smallest; empties the buffer."""
        import pyarrow as pa

        filled = [p for p, chunk in enumerate(self.chunks) if chunk]
        firsts = []
        for p in filled:
            self.chunks[p].sort()
            firsts.append(self.chunks[p][0])
        batch = pa.RecordBatch.from_arrays(
            [pa.array([self.pinned[p] for p in filled], pa.string()),
             pa.array([f[0] for f in firsts], pa.int64()),
             pa.array([f[1] for f in firsts], pa.int32()),
             pa.array([f[2] for f in firsts], pa.int64()),
             pa.array([f[3] for f in firsts], pa.int32()),
             pa.array([marshal.dumps(self.chunks[p], MARSHAL_VERSION) for p in filled],
                      pa.binary())],
            schema=exploded_schema(),
        )
        self.clear()
        return batch


class StreamExploder:
    """One input stream -> routed sample items, through the intake with the stream's clock."""

    def __init__(self, ctx: ExplodeContext, seed: Sequence[int] = ()) -> None:
        self.ctx = ctx
        self.engine = engine_with_configs(ctx.settings, ctx.configs)
        clock = StreamClock(ctx.max_skew_ms)
        if seed:  # the stream's timestamps before its first record read (`ExplodeContext.seeds`)
            clock.seed(list(seed))
        #: the records the clock holds, each with its position and dead-letter source
        self.intake: StreamIntake[tuple[int, int, Callable[[], str]]] = StreamIntake(clock)
        #: the stream time: the largest `ts` accepted, of the records the clock let go
        self.time = -1
        self.router: RouteCache[Route] = RouteCache(self.engine, route_texts)
        self._placer = RequestPlacer(self.engine.timeline)
        self.last: tuple[int, int] = (-1, -1)
        self.stopped = False
        self.events = 0
        self.bad = 0
        self.configs = 0
        self.skipped = 0
        self.kafka = ctx.mode == MODE_KAFKA
        self.route_map = ctx.route_map or {}

    # routing ------------------------------------------------------------------------------

    def _partition_of(self, out: ExplodedRows) -> Callable[[RequestColumns, int], int]:
        """The step-2 partition of request row `i` (for `RequestPlacer`; merged split groups:
        see `route_map`)."""
        def resolve(batch: RequestColumns, i: int) -> int:
            found = self.router.request_route(batch, i)[0]
            rk = found[0] if isinstance(found, tuple) else found
            return out.partition(self.route_map.get(rk, rk))
        return resolve

    # input ------------------------------------------------------------------------------------

    def _check_order(self, s: int, pos: int) -> None:
        here = (s, pos)
        if here <= self.last:
            raise RuntimeError(
                f"stream input out of order: {here} after {self.last}; the audit needs each "
                "stream in offset (archive: file, row) order"
            )
        self.last = here

    def feed(self, s: int, pos: int, value: bytes | None, out: ExplodedRows,
             where: Callable[[], str], arrival: int | None = None) -> None:
        """One input record (Kafka value or archive line) at position (s, pos); `arrival` is
        its Kafka timestamp (None: an archive line, or a dump without timestamps)."""
        if self.stopped:
            return
        self._check_order(s, pos)
        arrived = FOREVER if arrival is None else arrival
        if self.kafka:
            decoded = decode_source(value, arrived)
        else:
            found = decode_line(value or b"", arrived)
            if found is None:
                return
            decoded = found
            if decoded.configs:  # collected before step 1, in force from their ts
                if not self.ctx.configs:
                    raise RuntimeError("an archive's configs must be in the context "
                                       "(`archive_configs`) before step 1")
                self.configs += decoded.configs
        self._release(self.intake.offer(decoded, (s, pos, where)), out)

    def finish(self, out: ExplodedRows) -> None:
        """The stream's input ended: the records its clock still holds, judged with what is
        there."""
        if not self.stopped:
            self._release(self.intake.finish(), out)

    def _release(self, judged: list[tuple[Decoded, tuple[int, int, Callable[[], str]]]],
                 out: ExplodedRows) -> None:
        for decoded, (s, pos, where) in judged:
            if self.stopped:
                return
            self.time = self._items(s, pos, decoded, out, where, self.time)

    def _items(self, s: int, pos: int, decoded: Decoded, out: ExplodedRows,
               where: Callable[[], str], time: int) -> int:
        """A decoded record's items in record order; `time`: the stream time before it, and
        returned, after it."""
        kafka = self.kafka
        ctx = self.ctx
        arrival = decoded.arrival
        if not (decoded.others or decoded.dead or ctx.discover or ctx.keep is not None
                or ctx.stop_after is not None or ctx.event_from is not None
                or ctx.event_to is not None):  # requests only, all kept: the compiled path
            n = len(decoded.requests)
            if n:
                time = self._placer.place(decoded.requests, decoded.request_at, time, kafka, s,
                                          pos, out.chunks, self._partition_of(out))
                self.events += n
                out.size += n
            return time
        slots: list[Any] = [None] * decoded.size
        for k, index in enumerate(decoded.request_at):
            slots[index] = k
        for event, index in zip(decoded.others, decoded.other_at):
            slots[index] = event
        for index, reason, raw in decoded.dead:
            slots[index] = (reason, raw)
        requests = decoded.requests
        for index, slot in enumerate(slots):
            if slot is None:  # an archive's config
                continue
            if type(slot) is tuple:
                self.bad += 1
                out.bad(((max(time, 0) if kafka else 0), s, pos, index), slot[0], slot[1],
                        where())
                continue
            if type(slot) is int:
                kind, ts = ROW_REQUEST, requests.ts[slot]
                found, entities = self.router.request_route(requests, slot)
            else:
                kind, args = event_args(slot)
                ts = slot.ts
                found, entities = self.router.routes(slot, arrival)
            if ts > time:
                time = ts
            if ctx.stop_after is not None and time > ctx.stop_after:
                self.stopped = True
                return time
            if (ctx.event_from is not None and ts < ctx.event_from) or (
                    ctx.event_to is not None and ts >= ctx.event_to):
                continue
            if ctx.keep is not None and ctx.keep.isdisjoint(entities):
                self.skipped += 1
                continue
            if isinstance(found, tuple):
                if ctx.discover:
                    out.splits.add(KEY_SEP.join(found))
                    continue
                rk = found[0]
            else:
                rk = found
                if ctx.discover:
                    continue
            self.events += 1
            payload = request_payload(requests, slot) if kind == ROW_REQUEST else args
            out.chunks[out.partition(self.route_map.get(rk, rk))].append(
                (time if kafka else 0, s, pos, index, kind, payload, arrival))
            out.size += 1
        return time


def explode_function(ctx: ExplodeContext, batch_rows: int = 20_000
                     ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Step 1 as a `mapInArrow` function over the Kafka-shaped input.

    Input columns: `topic, partition, offset, value` and, when known, `timestamp` (Kafka mode)
    or `file, offset, value` (file mode), each stream's rows in order. Output: `EXPLODED_DDL`, or `SPLITS_DDL` when
    `ctx.discover` is set.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with gc_paused():
            yield from _explode(batches)

    def _explode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        exploders: dict[Any, StreamExploder] = {}
        out = ExplodedRows(ctx.pinned)
        kafka = ctx.mode == MODE_KAFKA
        streams = ctx.streams
        single = None if kafka else StreamExploder(ctx)
        for batch in batches:
            names = batch.schema.names
            offsets = batch.column(names.index("offset")).to_pylist()
            values = batch.column(names.index("value")).to_pylist()
            if kafka:
                topics = batch.column(names.index("topic")).to_pylist()
                parts = batch.column(names.index("partition")).to_pylist()
                stamps = (timestamps_ms(batch.column(names.index("timestamp")))
                          if "timestamp" in names else [None] * len(offsets))
                for topic, part, offset, value, stamp in zip(topics, parts, offsets, values,
                                                             stamps):
                    sid = streams[(topic, part)]
                    ex = exploders.get(sid)
                    if ex is None:
                        ex = exploders[sid] = StreamExploder(ctx, ctx.seeds.get((topic, part), ()))
                    ex.feed(sid, offset, value, out,
                            lambda t=topic, p=part, o=offset: f"{t}/{p}@{o}", stamp)
            else:
                files = batch.column(names.index("file")).to_pylist()
                assert single is not None
                for file, offset, value in zip(files, offsets, values):
                    single.feed(streams[file], offset, value, out,
                                lambda f=file, o=offset: f"{f}@{o}")
            if len(out) >= batch_rows and not ctx.discover:
                yield out.to_batch()
        for ex in exploders.values():
            ex.finish(out)
        if single is not None:
            single.finish(out)
        if ctx.discover:
            keys = sorted(out.splits)
            if keys:
                yield pa.RecordBatch.from_arrays([pa.array(keys, pa.string())], names=["keys"])
            return
        if len(out):
            yield out.to_batch()

    return run


def timestamps_ms(column: Any) -> list[int | None]:
    """A Kafka `timestamp` column (Arrow timestamp, or epoch ms as integers) as epoch ms."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_timestamp(column.type):
        column = pc.divide(column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64()),
                           1000)
    return column.to_pylist()


# -- step 2: run the engine ------------------------------------------------------------------


@dataclass(frozen=True)
class RunContext:
    settings: EngineSettings
    configs: tuple[ConfigEntry, ...] = ()
    report_from: int | None = None
    report_to: int | None = None
    #: A directory every task can write to (local Spark, local output): step 2 writes its
    #: decisions there itself (`DecisionFiles`) and returns only the other rows.
    decisions_dir: str | None = None
    #: a row per decision (else only those that published a directive)
    every_decision: bool = True
    #: the summaries' time bucket; None: no summaries
    bucket_ms: int | None = BASE_BUCKET_MS

    def outputs(self) -> ResultRows:
        """Empty output buffers for one route partition."""
        s = self.settings
        summaries = None if self.bucket_ms is None else Summaries(
            self.bucket_ms, s.controller_window_num * s.controller_window_ms, entity_string,
            self.report_from, self.report_to)
        return ResultRows(self.report_from, self.report_to, self.every_decision, summaries)


class Runner:
    """One engine over one route partition's items in key order.

    Its input is chunks sorted by their first key (`EXPLODED_DDL`); chunks of different
    streams overlap, so the items are merged as they come: when a chunk arrives, every
    pending item with a smaller key than its first is final (no later chunk can hold a
    smaller one), and those are run in key order. Memory: the pending chunks, about one per
    input stream.
    """

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.engine = engine_with_configs(ctx.settings, ctx.configs)
        self._last: Key = (-(2**63), -(2**31), -1, -1)
        self._last_request: Key = self._last
        self._pending: list[tuple[list[Item], int]] = []
        self.events = 0

    def process(self, key: Key, event: Any, arrival: int, out: ResultRows) -> None:
        """Run the engine on one connection or mutation (`arrival`: its record's Kafka
        timestamp), buffer its decisions."""
        self._order(key)
        decisions, directives = self.engine.process(event, arrival)
        self.events += 1
        if decisions:
            out.add(key[1], key[2], key[3], event_amounts(event), decisions, directives)

    def process_requests(self, keys: list[Key], batch: RequestColumns, out: ResultRows) -> None:
        """Run the engine on request rows in key order (the batch entry), buffer decisions.
        Their order is checked apart from the other samples': they never share a window."""
        if keys[0] < self._last_request:
            raise RuntimeError(f"step 2 input not sorted: {keys[0]} after {self._last_request}")
        self._last_request = keys[-1]
        decisions: list[list[Decision]] = []
        published: dict[int, list[dict[str, Any]]] = {}
        for directive, i in apply_samples(self.engine, batch, (), (), decisions):
            published.setdefault(i, []).append(directive)
        self.events += len(keys)
        out.requests(keys, batch, decisions, published)

    def _order(self, key: Key) -> None:
        if key < self._last:
            raise RuntimeError(f"step 2 input not sorted: {key} after {self._last}")
        self._last = key

    def run_batch(self, batch: pa.RecordBatch, out: ResultRows) -> None:
        """Chunk rows, sorted by their first key (t, s, pos, i)."""
        names = batch.schema.names
        firsts = zip(*(batch.column(names.index(c)).to_pylist() for c in ("t", "s", "pos", "i")))
        for first, items in zip(firsts, batch.column(names.index("items")).to_pylist()):
            self._run_until(first, out)
            self._pending.append((marshal.loads(items), 0))

    def finish(self, out: ResultRows) -> None:
        """Run the items still pending: the input has ended."""
        self._run_until(None, out)

    def _run_until(self, key: Key | None, out: ResultRows) -> None:
        """Run every pending item whose key is before `key` (all of them for None)."""
        ready: list[Item] = []
        runs = 0
        keep: list[tuple[list[Item], int]] = []
        for items, start in self._pending:
            end = len(items) if key is None else bisect_left(items, key, start)
            if end > start:
                ready.extend(items[start:end])
                runs += 1
            if end < len(items):
                keep.append((items, end))
        self._pending = keep
        if runs > 1:
            ready.sort()  # merges the sorted runs; keys are unique, so only keys compare
        # requests, then the other samples: each in key order (they never share a window)
        batches, others = gather_requests(ready, REQUEST_BATCH)
        for keys, batch in batches:
            self.process_requests(keys, batch, out)
        classes = EVENT_CLASSES
        for t, s, pos, i, kind, payload, arrival in others:
            if kind in classes:
                self.process((t, s, pos, i), classes[kind](*payload), arrival, out)
            else:
                out.deadletter(s, pos, i, payload[0], payload[1])


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC during a step: the engine state and the buffers are many tracked
    objects without cycles, and the collector's repeated full passes over them cost as much as
    the work (measured: step 2 at 26 us/event with the GC on vs 16.5 with it off)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class DecisionFiles:
    """Step 2's decisions written by the task itself, one Parquet file per route partition.

    Why: handing ~2 decisions per event back to Spark cost the JVM more than the rest of the
    recompute (Arrow to rows, then Parquet encoding, ~8 of ~17 JVM CPU-s at 1M events);
    pyarrow writes the same columns from the batches step 2 has already built. Safe under task
    retries and speculative attempts without a commit protocol, because a route partition's
    decisions are deterministic (same sorted input, same engine): each attempt writes a hidden
    temporary file and renames it to `part-<partition>.parquet`, so whichever attempt renames
    last leaves the same file.
    """

    #: dictionary-encode only the repetitive strings (`observed`, `ts` etc. are near-unique)
    DICTIONARY = ("quota", "entity", "action", "config_level")

    def __init__(self, directory: str, partition: int, attempt: int) -> None:
        self.final = os.path.join(directory, f"part-{partition:05d}.parquet")
        self.temp = os.path.join(directory, f".part-{partition:05d}.{attempt}.{os.getpid()}.tmp")
        self.writer: Any = None

    def write(self, batch: pa.RecordBatch) -> None:
        import pyarrow.parquet as pq

        batch = batch.select(list(DECISION_COLUMNS))
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.temp, batch.schema, compression="snappy",
                                           use_dictionary=list(self.DICTIONARY))
        self.writer.write_batch(batch)

    def commit(self) -> None:
        if self.writer is not None:
            self.writer.close()
            os.replace(self.temp, self.final)


def run_function(ctx: RunContext, batch_rows: int = 20_000
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Step 2 as a `mapInArrow` function: input sorted by (t, s, pos, i) per partition.

    With `ctx.decisions_dir` the decisions go to this task's `DecisionFiles` and only the
    directive copies and dead letters are returned.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        files = None
        if ctx.decisions_dir is not None:
            from pyspark import TaskContext

            task = TaskContext.get()
            files = DecisionFiles(ctx.decisions_dir, task.partitionId(), task.attemptNumber())
        with gc_paused():
            runner = Runner(ctx)
            out = ctx.outputs()
            for batch in batches:
                runner.run_batch(batch, out)
                if len(out) >= batch_rows:
                    yield from _returned(out.to_batches(), files)
            runner.finish(out)
            yield from _returned(out.to_batches(final=True), files)
        if files is not None:
            files.commit()

    return run


def _returned(batches: list[pa.RecordBatch], files: DecisionFiles | None
              ) -> Iterator[pa.RecordBatch]:
    """Step 2's batches that go back to Spark; decision batches go to `files` when given."""
    for batch in batches:
        if files is not None and batch.num_rows and batch.column("kind")[0].as_py() == "decision":
            files.write(batch)
        else:
            yield batch


# -- in-process ------------------------------------------------------------------------------


@dataclass
class LocalResult:
    """`recompute_local` output: a pyarrow Table in `RESULT_DDL` shape, in sort-key order."""

    table: Any
    events: int
    bad: int

    def rows(self, kind: str) -> list[dict[str, Any]]:
        """The rows of one `kind` (`app.audit.results.RESULT_COLUMNS`)."""
        return [r for r in self.table.to_pylist() if r["kind"] == kind]

    def decisions(self) -> list[dict[str, Any]]:
        return self.rows("decision")

    def directives(self) -> list[bytes]:
        """Directive JSON in input order ((s, pos, i, di)), as replay writes them."""
        rows = sorted((r for r in self.decisions() if r["directive"] is not None),
                      key=lambda r: (r["s"], r["pos"], r["i"], r["di"]))
        return [r["directive"].encode() for r in rows]


def recompute_local(
    records: Iterable[tuple[Any, int, bytes | None, int | None]],
    ctx: ExplodeContext,
    report_from: int | None = None,
    report_to: int | None = None,
) -> LocalResult:
    """Both steps in-process over `(stream, position, value, Kafka timestamp or None)` records,
    each stream in order.

    `stream` is a (topic, partition) in Kafka mode and a file name in file mode (it must be
    in `ctx.streams`). One engine runs over all events sorted by key, which equals any route
    partitioning (windows are independent).
    """
    import pyarrow as pa

    exploders: dict[Any, StreamExploder] = {}
    out = ExplodedRows(ctx.pinned)
    batches = []
    for stream, pos, value, arrival in records:
        sid = ctx.streams[stream]
        clock_key = stream if ctx.mode == MODE_KAFKA else None
        ex = exploders.get(clock_key)
        if ex is None:
            ex = exploders[clock_key] = StreamExploder(ctx, ctx.seeds.get(stream, ()))
        ex.feed(sid, pos, value, out, lambda st=stream, p=pos: f"{st}@{p}", arrival)
        if len(out) >= 50_000:
            batches.append(out.to_batch())
    for ex in exploders.values():
        ex.finish(out)
    if len(out):
        batches.append(out.to_batch())
    table = pa.Table.from_batches(batches, schema=exploded_schema())
    table = table.sort_by([("t", "ascending"), ("s", "ascending"), ("pos", "ascending"),
                           ("i", "ascending")])
    run_ctx = RunContext(ctx.settings, ctx.configs, report_from, report_to)
    runner = Runner(run_ctx)
    res = run_ctx.outputs()
    results = []
    with gc_paused():
        for batch in table.to_batches(max_chunksize=20_000):
            runner.run_batch(batch, res)
            results.extend(res.to_batches())
        runner.finish(res)
        results.extend(res.to_batches(final=True))
    result = pa.Table.from_batches(results, schema=result_schema())
    return LocalResult(result, sum(e.events for e in exploders.values()),
                       sum(e.bad for e in exploders.values()))
