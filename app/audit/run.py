"""Step 2 of the recompute, run: one engine per route partition, over that partition's chunks
merged into sort-key order, into decisions, directives and summaries. The rules it keeps are in
`app.audit.recompute`."""

from __future__ import annotations

import marshal
import os
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.contract.entities import entity_string
from app.audit.event_codec import EVENT_CLASSES
from app.audit.recompute import ConfigEntry, Item, Key, engine_with_configs, gc_paused
from app.audit.request_items import gather_requests
from app.audit.results import DECISION_COLUMNS, ResultRows
from app.audit.summaries import BASE_BUCKET_MS, Summaries, event_amounts
from app.engine.batch import RequestColumns
from app.engine.engine import Decision, EngineSettings
from app.intake.apply import apply_samples

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

#: request rows step 2 hands the engine at once at most
REQUEST_BATCH = 4096


@dataclass(frozen=True)
class RunContext:
    """Everything step 2 needs, shipped to every task."""

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


class DecisionFiles:
    """Step 2's decisions written by the task itself, one Parquet file per route partition.

    Why: handing ~2 decisions per event back to Spark cost the JVM more than the rest of the
    recompute (Arrow to rows, then Parquet encoding);
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
