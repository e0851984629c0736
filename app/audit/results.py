"""Step 2's output: the engine's decisions (and dead letters) as Arrow batches (`RESULT_DDL`).

Why it is built this way: with ~2 decisions per event, building this output cost step 2 about
as much as the engine itself. Each decision's fields are read once, right after the engine made
it, into one flat list (no per-decision tuple kept, no `zip(*rows)` transposition); each column
is then one strided slice of that list, converted to Arrow once per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from app.audit.common import entity_string
from app.engine import configs as cfg
from app.engine.engine import NANOS_TO_PERCENT, Decision
from app.engine.batch import RequestColumns
from app.engine.events import Event, MutationEvent

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

#: Step 2 output: decisions (`kind` = decision), again each decision that published a directive
#: (`kind` = directive: the directives dataset is then made from these few rows instead of
#: re-reading every decision), and dead letters (`kind` = deadletter).
RESULT_DDL = (
    "kind string, s int, pos long, i int, di int, ts long, broker int, quota string, "
    "entity string, action string, throttle_time_ms long, observed double, `limit` double, "
    "window_ms long, config_level string, amount double, directive string, reason string, "
    "deadletter string"
)


def result_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        ("kind", pa.string()), ("s", pa.int32()), ("pos", pa.int64()), ("i", pa.int32()),
        ("di", pa.int32()), ("ts", pa.int64()), ("broker", pa.int32()), ("quota", pa.string()),
        ("entity", pa.string()), ("action", pa.string()), ("throttle_time_ms", pa.int64()),
        ("observed", pa.float64()), ("limit", pa.float64()), ("window_ms", pa.int64()),
        ("config_level", pa.string()), ("amount", pa.float64()), ("directive", pa.string()),
        ("reason", pa.string()), ("deadletter", pa.string()),
    ])


#: What a decision records (`amount`): index into a sample's amounts per quota type.
_AMOUNT_OF = {cfg.PRODUCE: 0, cfg.FETCH: 0, cfg.REQUEST: 1, cfg.MUTATION: 2}
_ONE = 3
Amounts = tuple[float, float, float, float]


def request_amounts(batch: RequestColumns, i: int) -> Amounts:
    """(bytes, percent of a thread, partitions, 1) as request row `i`'s decisions record them."""
    return (float(batch.bytes[i]), batch.thread_ns[i] * NANOS_TO_PERCENT, 0.0, 1.0)


def event_amounts(event: Event) -> Amounts:
    """The same for a connection or a mutation."""
    if type(event) is MutationEvent:
        return (0.0, 0.0, float(event.partitions), 1.0)
    return (0.0, 0.0, 0.0, 1.0)


def _directive_texts(decisions: Sequence[Decision], directives: Sequence[dict[str, Any]]
                     ) -> list[str | None]:
    """Each decision's published directive (JSON, as `replay` writes it) or None.

    The engine returns directives in the order of the throttled decisions that published one.
    """
    texts: list[str | None] = [None] * len(decisions)
    j, nd = 0, len(directives)
    for di, d in enumerate(decisions):
        if j < nd and d.throttle_time_ms > 0:
            candidate = directives[j]
            if candidate["entity"] is d.entity and candidate["quota"] == d.quota:
                texts[di] = orjson.dumps(candidate).decode()
                j += 1
    if j != nd:  # pragma: no cover - a broken invariant, not bad input
        raise RuntimeError("directives did not line up with their decisions")
    return texts


class ResultRows:
    """Step 2 output buffers: decisions as one flat list, `FIELDS` after `FIELDS` (column k is
    the slice `flat[k::len(FIELDS)]`, ~3x cheaper than `zip(*rows)`), dead letters apart."""

    #: Per-decision layout; the other `RESULT_DDL` columns are constant for decisions.
    FIELDS = ("s", "pos", "i", "di", "ts", "broker", "quota", "entity", "action",
              "throttle_time_ms", "observed", "limit", "window_ms", "config_level", "amount",
              "directive")

    def __init__(self) -> None:
        self.flat: list[Any] = []
        self.bad: list[tuple[int, int, int, str, str]] = []
        #: entity name by window state key (a key names one window, so one entity)
        self._names: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.flat) // len(self.FIELDS) + len(self.bad)

    def add(self, s: int, pos: int, i: int, amounts: Amounts, decisions: list[Decision],
            directives: list[dict[str, Any]], lo: int | None, hi: int | None) -> None:
        """One sample's decisions (those with `ts` in [lo, hi)) and the directives they published.

        Fields are read here, while the decision is still in the CPU cache: reading them per
        batch (C-level getters over kept `Decision` objects) made step 2 ~10% slower.
        """
        texts = _directive_texts(decisions, directives) if directives else None
        amount_of = _AMOUNT_OF
        names = self._names
        extend = self.flat.extend
        for di, d in enumerate(decisions):
            ts = d.ts
            if (lo is not None and ts < lo) or (hi is not None and ts >= hi):
                continue
            name = names.get(d.key)
            if name is None:
                name = self._name(d.key, d.entity)
            quota = d.quota
            extend((s, pos, i, di, ts, d.broker, quota, name, d.action, d.throttle_time_ms,
                    d.observed, d.limit, d.window_ms, d.config_level,
                    amounts[amount_of.get(quota, _ONE)], None if texts is None else texts[di]))

    def deadletter(self, s: int, pos: int, i: int, reason: str, record: bytes) -> None:
        self.bad.append((s, pos, i, reason, record.decode()))

    def _name(self, key: str, entity: dict[str, Any]) -> str:
        """The entity's name, cached under its window's state key (bounded)."""
        name = entity_string(entity)
        if len(self._names) > 100_000:
            self._names.clear()
        self._names[key] = name
        return name

    def to_batches(self) -> list[pa.RecordBatch]:
        """The buffered rows as batches (decisions, directives, dead letters); empties them."""
        import pyarrow as pa

        schema = result_schema()
        out = []
        if self.flat:
            width = len(self.FIELDS)
            n = len(self.flat) // width
            cols = {name: self.flat[k::width] for k, name in enumerate(self.FIELDS)}
            decisions = pa.RecordBatch.from_arrays(
                [pa.array(cols[f.name], f.type) if f.name in cols
                 else pa.repeat(pa.scalar("decision", f.type), n) if f.name == "kind"
                 else pa.nulls(n, f.type) for f in schema], schema=schema)
            out.append(decisions)
            if decisions.column("directive").null_count < n:
                published = decisions.filter(decisions.column("directive").is_valid())
                out.append(published.set_column(
                    0, schema.field("kind"),
                    pa.repeat(pa.scalar("directive", pa.string()), published.num_rows)))
        if self.bad:
            n = len(self.bad)
            s, pos, i, reason, record = zip(*self.bad)
            given = {"kind": ["deadletter"] * n, "s": s, "pos": pos, "i": i, "reason": reason,
                     "deadletter": record}
            out.append(pa.RecordBatch.from_arrays(
                [pa.array(given[f.name], f.type) if f.name in given else pa.nulls(n, f.type)
                 for f in schema], schema=schema))
        self.flat = []
        self.bad = []
        return out
