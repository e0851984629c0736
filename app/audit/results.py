"""Step 2's output as Arrow batches (`RESULT_DDL`): decisions, directives, dead letters and
the summaries (`app.audit.summaries`).

Why it is built this way: with ~2 decisions per event, building one row per decision cost step
2 about as much as the engine itself. So decision rows are optional (the summaries are the
default), and when built, each decision's fields are read once, right after the engine made
it, into one flat list (no per-decision tuple kept, no `zip(*rows)` transposition); each
column is then one strided slice of that list, converted to Arrow once per batch.
"""

from __future__ import annotations

import marshal
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from app.contract.entities import entity_string
from app.audit.summaries import AMOUNT_OF, ONE, Amounts, Summaries, request_amounts
from app.engine.batch import RequestColumns
from app.engine.engine import Decision

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

#: Step 2's output columns (name, Spark SQL type). A row's `kind` says which are set:
#: `decision` (`DECISION_COLUMNS`); `directive`, again each decision that published a
#: directive (the directives dataset is made from these few rows instead of re-reading every
#: decision); `deadletter` (`DEADLETTER_COLUMNS`); `usage` (`USAGE_FIELDS`) and `sketch`
#: (`SKETCH_FIELDS`), the summaries' rows.
RESULT_COLUMNS = (
    ("kind", "string"), ("s", "int"), ("pos", "long"), ("i", "int"), ("di", "int"),
    ("ts", "long"), ("broker", "int"), ("quota", "string"), ("entity", "string"),
    ("action", "string"), ("throttle_time_ms", "long"), ("observed", "double"),
    ("limit", "double"), ("window_ms", "long"), ("config_level", "string"),
    ("amount", "double"), ("directive", "string"), ("reason", "string"),
    ("deadletter", "string"), ("bucket", "long"), ("decisions", "long"),
    ("sum_observed", "double"), ("max_observed", "double"), ("throttled", "long"),
    ("throttle_ms", "long"), ("directives", "long"), ("first_ts", "long"), ("last_ts", "long"),
    ("sketch", "binary"),
)
DECISION_COLUMNS = ("s", "pos", "i", "di", "ts", "broker", "quota", "entity", "action",
                    "throttle_time_ms", "observed", "limit", "window_ms", "config_level",
                    "amount", "directive")
DEADLETTER_COLUMNS = ("s", "pos", "i", "reason", "deadletter")
#: `summaries.UsageRow`, by name
USAGE_FIELDS = ("entity", "quota", "broker", "bucket", "decisions", "amount", "sum_observed",
                "max_observed", "limit", "throttled", "throttle_ms", "directives", "first_ts",
                "last_ts")
#: `summaries.SketchRow`, by name (`ts`, `limit`, `config_level`: the window's latest;
#: `max_observed`: its largest rate; `sketch`: the `marshal`led sketch state)
SKETCH_FIELDS = ("entity", "quota", "broker", "decisions", "throttled", "ts", "limit",
                 "config_level", "max_observed", "sketch")


def ddl(columns: Sequence[str] | None = None) -> str:
    """Spark DDL of these output columns (all of them by default), in output order."""
    return ", ".join(f"`{name}` {kind}" for name, kind in RESULT_COLUMNS
                     if columns is None or name in columns)


RESULT_DDL = ddl()


def result_schema() -> pa.Schema:
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(),
             "double": pa.float64(), "binary": pa.binary()}
    return pa.schema([(name, types[kind]) for name, kind in RESULT_COLUMNS])


def published_by(decisions: Sequence[Decision], directives: Sequence[dict[str, Any]]
                 ) -> list[int]:
    """The indexes of the decisions that published `directives` (the engine returns them in
    the order of the throttled decisions that published one)."""
    found: list[int] = []
    j, nd = 0, len(directives)
    for di, d in enumerate(decisions):
        if j < nd and d.throttle_time_ms > 0:
            candidate = directives[j]
            if candidate["entity"] is d.entity and candidate["quota"] == d.quota:
                found.append(di)
                j += 1
    if j != nd:  # pragma: no cover - a broken invariant, not bad input
        raise RuntimeError("directives did not line up with their decisions")
    return found


class ResultRows:
    """Step 2 output buffers: decision rows as one flat list, `FIELDS` after `FIELDS` (column
    k is the slice `flat[k::len(FIELDS)]`, ~3x cheaper than `zip(*rows)`), dead letters apart,
    and the `Summaries` of the decisions.

    With `every_decision` False (the audit's default) only the decisions that published a
    directive become rows: the directives dataset is made from them, and usage and the
    recommendations from the summaries.
    """

    #: Per-decision layout; the other `RESULT_DDL` columns are constant for decisions.
    FIELDS = ("s", "pos", "i", "di", "ts", "broker", "quota", "entity", "action",
              "throttle_time_ms", "observed", "limit", "window_ms", "config_level", "amount",
              "directive")

    def __init__(self, report_from: int | None = None, report_to: int | None = None,
                 every_decision: bool = True, summaries: Summaries | None = None) -> None:
        self.lo = report_from
        self.hi = report_to
        self.every_decision = every_decision
        self.summaries = summaries
        self.flat: list[Any] = []
        self.bad: list[tuple[int, int, int, str, str]] = []
        #: entity name by window state key (a key names one window, so one entity)
        self._names: dict[str, str] = {}

    def __len__(self) -> int:
        """Rows waiting, the summaries' cells included: a caller that empties the buffer when
        it is long enough also lets the summaries flush when they are full (`to_batches`)."""
        pending = 0 if self.summaries is None else self.summaries.cells
        return len(self.flat) // len(self.FIELDS) + len(self.bad) + pending

    def add(self, s: int, pos: int, i: int, amounts: Amounts, decisions: list[Decision],
            directives: list[dict[str, Any]]) -> None:
        """One sample's decisions and the directives they published."""
        published = published_by(decisions, directives) if directives else []
        if self.summaries is not None:
            self.summaries.add(amounts, decisions, published)
        if directives or self.every_decision:
            self._rows(s, pos, i, amounts, decisions, directives, published)

    def requests(self, keys: Sequence[tuple[int, int, int, int]], batch: RequestColumns,
                 decisions: list[list[Decision]], published: dict[int, list[dict[str, Any]]]
                 ) -> None:
        """A batch's request rows at sort keys `keys`, their decisions, and per row that
        published any, its directives."""
        marks = {i: published_by(decisions[i], ds) for i, ds in published.items()}
        if self.summaries is not None:
            self.summaries.requests(batch, decisions, marks)
        for i in (range(len(keys)) if self.every_decision else sorted(published)):
            if decisions[i]:
                key = keys[i]
                self._rows(key[1], key[2], key[3], request_amounts(batch, i), decisions[i],
                           published.get(i, []), marks.get(i, []))

    def _rows(self, s: int, pos: int, i: int, amounts: Amounts, decisions: list[Decision],
              directives: list[dict[str, Any]], published: list[int]) -> None:
        """Rows for one sample's decisions with `ts` in the reported range (all of them, or
        those that published a directive).

        Fields are read here, while the decision is still in the CPU cache: reading them per
        batch (C-level getters over kept `Decision` objects) made step 2 ~10% slower.
        """
        texts: dict[int, str] = {di: orjson.dumps(d).decode()
                                 for di, d in zip(published, directives)}
        amount_of = AMOUNT_OF
        names = self._names
        extend = self.flat.extend
        lo, hi = self.lo, self.hi
        every = self.every_decision
        for di, d in enumerate(decisions):
            ts = d.ts
            if (lo is not None and ts < lo) or (hi is not None and ts >= hi):
                continue
            text = texts.get(di)
            if text is None and not every:
                continue
            name = names.get(d.key)
            if name is None:
                name = self._name(d.key, d.entity)
            quota = d.quota
            extend((s, pos, i, di, ts, d.broker, quota, name, d.action, d.throttle_time_ms,
                    d.observed, d.limit, d.window_ms, d.config_level,
                    amounts[amount_of.get(quota, ONE)], text))

    def deadletter(self, s: int, pos: int, i: int, reason: str, record: bytes) -> None:
        self.bad.append((s, pos, i, reason, record.decode()))

    def _name(self, key: str, entity: dict[str, Any]) -> str:
        """The entity's name, cached under its window's state key (bounded)."""
        name = entity_string(entity)
        if len(self._names) > 100_000:
            self._names.clear()
        self._names[key] = name
        return name

    def to_batches(self, final: bool = False) -> list[pa.RecordBatch]:
        """The buffered rows as batches (decisions, directives, dead letters, and the
        summaries when `final` or when they are full); empties them."""
        import pyarrow as pa

        schema = result_schema()
        out = []
        if self.flat:
            width = len(self.FIELDS)
            n = len(self.flat) // width
            cols = {name: self.flat[k::width] for k, name in enumerate(self.FIELDS)}
            decisions = _batch(schema, n, "decision", cols)
            if self.every_decision:
                out.append(decisions)
            if decisions.column("directive").null_count < n:
                published = decisions.filter(decisions.column("directive").is_valid())
                out.append(published.set_column(
                    0, schema.field("kind"),
                    pa.repeat(pa.scalar("directive", pa.string()), published.num_rows)))
        if self.bad:
            s, pos, i, reason, record = zip(*self.bad)
            out.append(_batch(schema, len(self.bad), "deadletter", {
                "s": s, "pos": pos, "i": i, "reason": reason, "deadletter": record}))
        summaries = self.summaries
        if summaries is not None and (final or summaries.full()):
            usage, sketches = summaries.flush(final)
            if usage:
                out.append(_batch(schema, len(usage), "usage", dict(zip(USAGE_FIELDS,
                                                                          zip(*usage)))))
            if sketches:
                given: dict[str, Sequence[Any]] = dict(zip(SKETCH_FIELDS, zip(*sketches)))
                given["sketch"] = [marshal.dumps(state, 4) for state in given["sketch"]]
                out.append(_batch(schema, len(sketches), "sketch", given))
        self.flat = []
        self.bad = []
        return out


def _batch(schema: pa.Schema, n: int, kind: str, given: Mapping[str, Sequence[Any]]
           ) -> pa.RecordBatch:
    """`n` rows of `kind` with the `given` columns, null elsewhere."""
    import pyarrow as pa

    return pa.RecordBatch.from_arrays(
        [pa.array(given[f.name], f.type) if f.name in given
         else pa.repeat(pa.scalar(kind, f.type), n) if f.name == "kind"
         else pa.nulls(n, f.type) for f in schema], schema=schema)
