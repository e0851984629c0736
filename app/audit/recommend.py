"""Quota recommendations from recomputed usage: percentiles and a suggested value.

Per entity and quota type, the usage distribution is the **observed rate at each decision**,
i.e. over the window the quota itself measures (N samples of W ms, as Kafka's `Rate`):
bytes/s for producer/consumer byte rates, percent of one I/O thread for `request_percentage`,
connections/s for connection rates. For `controller_mutation_rate` the decision's `observed`
is the token balance, not a rate, so its usage is the partitions mutated over the last
controller window span (N x W) divided by that span, at each decision.

Suggested quota (the rule, also in docs/audit.md):

    suggested = round_up_2_significant_digits(p99 * headroom)      (headroom default 1.2)

made integral (at least 1) for the integer-valued quota types (byte rates, connection rates),
and at least 0.01 for `request_percentage` and `controller_mutation_rate`. No usage (p99 = 0)
gives no suggestion. p99 rather than max: one burst should not set the quota, and Kafka
throttles a burst only briefly. Percentiles are exact, with linear interpolation between
ranks (numpy's default, Spark's `percentile`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app.audit.common import nice_ceil
from app.engine import configs as cfg
from app.engine.kafka_math import INT_MAX_F, UNLIMITED

if TYPE_CHECKING:  # pragma: no cover
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


def usage_rates(decisions: DataFrame, controller_span_ms: int) -> DataFrame:
    """(entity, quota, broker, ts, rate, limit, config_level, throttled) per decision.

    `rate` is `observed` except for controller mutations (see the module docstring).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    base = decisions.select("entity", "quota", "broker", "ts", "observed", "amount", "limit",
                            "config_level", "throttle_time_ms")
    others = base.where(F.col("quota") != cfg.MUTATION).withColumn("rate", F.col("observed"))
    window = (Window.partitionBy("entity", "broker").orderBy("ts")
              .rangeBetween(-(controller_span_ms - 1), 0))
    mutations = (base.where(F.col("quota") == cfg.MUTATION)
                 .withColumn("rate", F.sum("amount").over(window) / (controller_span_ms / 1000.0)))
    return others.unionByName(mutations)


def aggregate(decisions: DataFrame, controller_span_ms: int) -> list[dict[str, Any]]:
    """Per (entity, quota): decisions, p50/p95/p99/max of the usage rate, current limit."""
    from pyspark.sql import functions as F

    rates = usage_rates(decisions, controller_span_ms)
    agg = rates.groupBy("entity", "quota").agg(
        F.count("*").alias("decisions"),
        F.percentile("rate", F.array(*[F.lit(q) for q in PERCENTILES])).alias("pcts"),
        F.max("rate").alias("max"),
        F.max_by("limit", "ts").alias("limit"),
        F.max_by("config_level", "ts").alias("config_level"),
        F.sum(F.when(F.col("throttle_time_ms") > 0, 1).otherwise(0)).alias("throttled"),
    )
    rows = []
    for r in agg.collect():
        p50, p95, p99 = r["pcts"]
        rows.append({"entity": r["entity"], "quota": r["quota"], "decisions": r["decisions"],
                     "p50": p50, "p95": p95, "p99": p99, "max": r["max"], "limit": r["limit"],
                     "config_level": r["config_level"], "throttled": r["throttled"]})
    return rows


def aggregate_local(decisions: Sequence[dict[str, Any]], controller_span_ms: int
                    ) -> list[dict[str, Any]]:
    """The same aggregation in plain Python (tests, small inputs)."""
    import bisect

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for d in decisions:
        groups.setdefault((d["entity"], d["quota"]), []).append(d)
    rows = []
    for (entity, quota), items in sorted(groups.items()):
        if quota == cfg.MUTATION:
            rates = []
            per_broker: dict[Any, list[dict[str, Any]]] = {}
            for d in items:
                per_broker.setdefault(d["broker"], []).append(d)
            for ds in per_broker.values():
                ds = sorted(ds, key=lambda d: d["ts"])
                times = [d["ts"] for d in ds]
                for d in ds:
                    lo = bisect.bisect_left(times, d["ts"] - (controller_span_ms - 1))
                    hi = bisect.bisect_right(times, d["ts"])
                    total = sum(x["amount"] for x in ds[lo:hi])
                    rates.append(total / (controller_span_ms / 1000.0))
        else:
            rates = [d["observed"] for d in items]
        p50, p95, p99 = percentiles(rates)
        last = max(items, key=lambda d: d["ts"])
        rows.append({"entity": entity, "quota": quota, "decisions": len(items), "p50": p50,
                     "p95": p95, "p99": p99, "max": max(rates), "limit": last["limit"],
                     "config_level": last["config_level"],
                     "throttled": sum(1 for d in items if d["throttle_time_ms"] > 0)})
    return rows
