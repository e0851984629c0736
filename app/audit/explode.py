"""Step 1 of the recompute, explode: one sequential pass per input stream, through the intake
with the stream's clock, turns records into routed sample items (and dead letters), packed into
chunks per step-2 partition. The rules it keeps are in `app.audit.recompute`."""

from __future__ import annotations

import marshal
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.audit.event_codec import MARSHAL_VERSION, event_args
from app.audit.recompute import (
    KEY_SEP,
    MODE_KAFKA,
    ROW_BAD,
    ConfigEntry,
    Item,
    Key,
    Route,
    engine_with_configs,
    exploded_schema,
    gc_paused,
    route_texts,
)
from app.audit.request_items import ROW_REQUEST, RequestPlacer, request_payload
from app.engine.batch import RequestColumns
from app.engine.engine import EngineSettings
from app.engine.timeline import FOREVER
from app.intake.clock import StreamClock
from app.intake.deadletter import encode_deadletter
from app.intake.records import Decoded, decode_line, decode_source
from app.intake.routes import RouteCache
from app.intake.stream import StreamIntake

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

DEFAULT_MAX_SKEW_MS = 86_400_000


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
