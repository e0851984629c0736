"""The DataFrames the audit's phases build: steps 1 and 2 over the planned input, the
directives, their diff against the control topic, usage per time bucket."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.audit import diff as diffmod
from app.audit.explode import ExplodeContext, explode_function
from app.audit.input_plan import InputPlan
from app.audit.options import AuditOptions
from app.audit.recompute import (
    EXPLODED_DDL,
    KEY_SEP,
    SPLITS_DDL,
    route_map_from_splits,
    splits_possible,
)
from app.audit.results import RESULT_DDL
from app.audit.run import RunContext, run_function
from app.audit.session import Progress
from app.audit.summaries import BASE_BUCKET_MS
from app.signing import Signing

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession


def pinned_keys(spark: SparkSession, n: int) -> tuple[str, ...]:
    """One route key per step-2 partition, found with Spark's own hash partitioning
    (`pmod(hash(rk), n)` is what `repartition(n, "rk")` computes)."""
    from pyspark.sql import functions as F

    found: dict[int, str] = {}
    batch = 0
    while len(found) < n:
        candidates = [(f"\x00partition-{batch}-{j}",) for j in range(max(64, 8 * n))]
        rows = (spark.createDataFrame(candidates, "rk string")
                .select("rk", F.expr(f"pmod(hash(rk), {n})").alias("p")).collect())
        for r in rows:
            found.setdefault(r["p"], r["rk"])
        batch += 1
        if batch > 50:  # pragma: no cover - would need a broken hash
            raise RuntimeError("could not pin a route key to every partition")
    return tuple(found[p] for p in range(n))


def recompute(spark: SparkSession, plan: InputPlan, opts: AuditOptions, n: int,
              progress: Progress, info: dict[str, Any] | None = None,
              decisions_dir: str | None = None) -> DataFrame:
    """Steps 1 and 2 as one DataFrame (lazy) in `RESULT_DDL` shape; `info` gets routing facts.

    With `decisions_dir` (see `app.audit.job.task_writable_dir`) step 2 writes the decisions there itself
    and the DataFrame holds only directive copies and dead letters.
    """
    info = {} if info is None else info
    info.update(split_check=False, split_key_sets=0, merged_groups=0)
    route_map = None
    lo = opts.time_from - opts.warmup() if opts.time_from is not None else None
    base = ExplodeContext(
        settings=opts.settings, mode=plan.mode, configs=tuple(plan.configs),
        streams=plan.streams, event_from=lo, event_to=opts.time_to, seeds=plan.seeds,
    )
    if splits_possible(plan.configs, opts.settings.config_grace_ms):
        progress.step("configs may split requests across route keys: discovering splits")
        discover = ExplodeContext(**{**_fields(base), "discover": True})
        keys = (plan.records.mapInArrow(explode_function(discover), SPLITS_DDL)
                .distinct().collect())
        route_map = route_map_from_splits(r["keys"].split(KEY_SEP) for r in keys)
        info.update(split_check=True, split_key_sets=len(keys),
                    merged_groups=len(set(route_map.values())))
        progress.step(f"{len(keys)} split key sets, {len(set(route_map.values()))} merged groups")
    ctx = ExplodeContext(**{**_fields(base), "route_map": route_map,
                            "pinned": pinned_keys(spark, n)})
    run_ctx = RunContext(opts.settings, tuple(plan.configs), opts.time_from, opts.time_to,
                         decisions_dir, every_decision=opts.decisions,
                         bucket_ms=opts.bucket_ms or BASE_BUCKET_MS)
    exploded = plan.records.mapInArrow(explode_function(ctx), EXPLODED_DDL)
    return (exploded.repartition(n, "rk").sortWithinPartitions("t", "s", "pos", "i")
            .mapInArrow(run_function(run_ctx), RESULT_DDL))


def _fields(ctx: ExplodeContext) -> dict[str, Any]:
    return {f: getattr(ctx, f) for f in ctx.__dataclass_fields__}


def directives_frame(decisions: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return (decisions.where(F.col("directive").isNotNull())
            .select("s", "pos", "i", "di", "ts",
                    F.when(F.col("broker").isNull(), "cluster").otherwise("broker").alias("scope"),
                    "broker", "entity", "quota", "action", "throttle_time_ms",
                    (F.col("ts") + F.col("throttle_time_ms")).alias("until"), "observed",
                    "limit", "window_ms", "config_level", "directive"))


def diff_frame(directives: DataFrame, control: DataFrame, n: int,
               bounds: tuple[int | None, int | None], control_topic: str,
               signing: Signing) -> DataFrame:
    """Expected (recomputed) vs actual (control) directives -> `DIFF_DDL` rows; the actual ones
    as read from `control_topic` (sealed ones verified with `signing`, `app.signing`)."""
    from pyspark.sql import functions as F

    expected = directives.select(
        F.lit("e").alias("side"), "scope", "broker", "entity", "quota", "ts",
        F.col("s").cast("long").alias("k1"), F.col("pos").alias("k2"),
        (F.col("i").cast("long") * 1000 + F.col("di")).alias("k3"),
        F.col("directive").alias("json"), F.lit(None).cast("string").alias("error"))
    actual = control.mapInArrow(diffmod.side_rows_function("a", control_topic, signing),
                                diffmod.SIDE_DDL)
    lo, hi = bounds
    if lo is not None:
        actual = actual.where(F.col("ts").isNull() | (F.col("ts") >= lo))
    if hi is not None:
        actual = actual.where(F.col("ts").isNull() | (F.col("ts") < hi))
    both = expected.unionByName(actual)
    return (both.repartition(n, "entity", "quota")
            .sortWithinPartitions("scope", "broker", "entity", "quota", "ts", "side", "k1", "k2", "k3")
            .mapInArrow(diffmod.diff_function(), diffmod.DIFF_DDL))


def usage_frame(cells: DataFrame, bucket_ms: int) -> DataFrame:
    """Step 2's usage cells (`summaries.Cell`; several rows of one window and bucket add up)
    -> per (entity, quota, broker, time bucket of `bucket_ms`): usage and throttle totals."""
    from pyspark.sql import functions as F

    bucket = (F.floor(F.col("bucket") / bucket_ms) * bucket_ms).cast("long")
    return (cells.withColumn("bucket", bucket)
            .groupBy("entity", "quota", "broker", "bucket")
            .agg(F.sum("decisions").alias("decisions"), F.sum("amount").alias("amount"),
                 F.max("max_observed").alias("max_observed"),
                 (F.sum("sum_observed") / F.sum("decisions")).alias("avg_observed"),
                 F.max("limit").alias("limit"), F.sum("throttled").alias("throttled"),
                 F.sum("throttle_ms").alias("throttle_ms"),
                 F.sum("directives").alias("directives"),
                 F.min("first_ts").alias("first_ts"), F.max("last_ts").alias("last_ts")))


__all__ = ["diff_frame", "directives_frame", "pinned_keys", "recompute", "usage_frame"]
