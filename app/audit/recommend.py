"""Quota recommendations from recomputed usage: percentiles and a suggested value.

Per entity and quota type, the usage distribution is the **usage rate at each decision**
(`app.audit.summaries`: over the window the quota itself measures, N samples of W ms, as
Kafka's `Rate`): bytes/s for producer/consumer byte rates, percent of one I/O thread for
`request_percentage`, connections/s for connection rates, and for `controller_mutation_rate`
the partitions mutated over the last controller window span (N x W) divided by that span.
Step 2 keeps it as mergeable sketches per window; this module merges an entity's windows (its
brokers) and reads the percentiles, within 0.5% of the exact ones (`SKETCH_ALPHA`).

Suggested quota (the rule, also in docs/audit.md):

    suggested = round_up_2_significant_digits(p99 * headroom)      (headroom default 1.2)

made integral (at least 1) for the integer-valued quota types (byte rates, connection rates),
and at least 0.01 for `request_percentage` and `controller_mutation_rate`. No usage (p99 = 0)
gives no suggestion. p99 rather than max: one burst should not set the quota, and Kafka
throttles a burst only briefly. Percentiles interpolate linearly between ranks (numpy's
default, Spark's `percentile`).
"""

from __future__ import annotations

import marshal
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.audit.common import nice_ceil
from app.audit.summaries import Sketch
from app.engine import configs as cfg
from app.engine.kafka_math import INT_MAX_F, UNLIMITED

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame

DEFAULT_HEADROOM = 1.2
PERCENTILES = (0.5, 0.95, 0.99)
INTEGRAL = {cfg.PRODUCE, cfg.FETCH, cfg.IP_RATE, cfg.BROKER_RATE}
UNITS = {cfg.PRODUCE: "B/s", cfg.FETCH: "B/s", cfg.REQUEST: "%", cfg.MUTATION: "partitions/s",
         cfg.IP_RATE: "conn/s", cfg.BROKER_RATE: "conn/s"}


def percentiles(values: Sequence[float], qs: Sequence[float] = PERCENTILES) -> list[float]:
    """Exact percentiles with linear interpolation (numpy 'linear', Spark `percentile`)."""
    if not values:
        return [math.nan for _ in qs]
    data = sorted(values)
    n = len(data)
    out = []
    for q in qs:
        pos = q * (n - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        frac = pos - lo
        out.append(data[lo] + (data[hi] - data[lo]) * frac if frac else float(data[lo]))
    return out


def suggest(p99: float | None, quota: str, headroom: float = DEFAULT_HEADROOM) -> float | None:
    """The suggested quota for a p99 usage (module docstring has the rule)."""
    if p99 is None or not math.isfinite(p99) or p99 <= 0:
        return None
    value = nice_ceil(p99 * headroom)
    if quota in INTEGRAL:
        return float(max(1, math.ceil(value)))
    return max(value, 0.01)


def limit_text(limit: float | None) -> str:
    if limit is None or limit >= INT_MAX_F or limit == UNLIMITED:
        return "unlimited"
    return f"{limit:g}"


def finish(rows: list[dict[str, Any]], headroom: float) -> list[dict[str, Any]]:
    """Add `suggested` and `change` (suggested / current limit) to aggregated rows."""
    out = []
    for row in rows:
        s = suggest(row.get("p99"), row["quota"], headroom)
        limit = row.get("limit")
        change = None
        if s is not None and limit and limit < INT_MAX_F:
            change = s / limit
        out.append({**row, "suggested": s, "vs_limit": change, "unit": UNITS.get(row["quota"], "")})
    out.sort(key=lambda r: (-(r.get("throttled") or 0), r["entity"], r["quota"]))
    return out


#: the recommendations' aggregate per (entity, quota), before `finish`: (name, Spark type)
AGGREGATE_COLUMNS = (("entity", "string"), ("quota", "string"), ("decisions", "long"),
                     ("p50", "double"), ("p95", "double"), ("p99", "double"), ("max", "double"),
                     ("limit", "double"), ("config_level", "string"), ("throttled", "long"))
AGGREGATE_DDL = ", ".join(f"`{name}` {kind}" for name, kind in AGGREGATE_COLUMNS)


def merge_sketches(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Sketch rows (`app.audit.results.SKETCH_FIELDS`) -> per (entity, quota): decisions,
    p50/p95/p99/max of the usage rate, the limit and level at the latest decision, and the
    throttled decisions. Rows of one window from several flushes merge like its brokers'."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["entity"], r["quota"])
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"sketch": Sketch(), "decisions": 0, "throttled": 0,
                               "max": -math.inf, "ts": None, "limit": None,
                               "config_level": None}
        g["sketch"].merge(Sketch.from_state(marshal.loads(r["sketch"])))
        g["decisions"] += r["decisions"]
        g["throttled"] += r["throttled"]
        g["max"] = max(g["max"], r["max_observed"])
        if g["ts"] is None or r["ts"] > g["ts"]:
            g["ts"], g["limit"], g["config_level"] = r["ts"], r["limit"], r["config_level"]
    out = []
    for (entity, quota), g in sorted(groups.items()):
        p50, p95, p99 = g["sketch"].percentiles(list(PERCENTILES))
        out.append({"entity": entity, "quota": quota, "decisions": g["decisions"], "p50": p50,
                    "p95": p95, "p99": p99, "max": g["max"], "limit": g["limit"],
                    "config_level": g["config_level"], "throttled": g["throttled"]})
    return out


def aggregate(sketches: DataFrame, partitions: int) -> list[dict[str, Any]]:
    """`merge_sketches` over Spark: each (entity, quota) merged in one task."""

    def merge(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        types = {"string": pa.string(), "long": pa.int64(), "double": pa.float64()}
        merged = merge_sketches(r for batch in batches for r in batch.to_pylist())
        if merged:
            yield pa.RecordBatch.from_pylist(merged, schema=pa.schema(
                [(name, types[kind]) for name, kind in AGGREGATE_COLUMNS]))

    frame = sketches.repartition(partitions, "entity", "quota").mapInArrow(merge, AGGREGATE_DDL)
    return [r.asDict() for r in frame.collect()]
