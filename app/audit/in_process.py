"""Both steps of the recompute in-process, with no Spark: the tests' and the benchmark's
reference for what the Spark job computes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.audit.explode import ExplodeContext, ExplodedRows, StreamExploder
from app.audit.recompute import MODE_KAFKA, exploded_schema, gc_paused
from app.audit.results import result_schema
from app.audit.run import RunContext, Runner


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
